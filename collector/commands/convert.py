"""`xpu-perf convert`: PyTorch profiler (Kineto) JSON -> native Perfetto trace."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.text import Text

from collector.commands.flags import add_output_flag, add_quiet_flag
from collector.errors import UserError
from collector.files import check_input, check_output
from collector.gc_pause import collected_now_and_then
from collector.visible_text import printable
from exporters.perfetto.writer import (
    DEFAULT_COMPRESSION_LEVEL,
    MAX_COMPRESSION_LEVEL,
    TraceWriter,
)

if TYPE_CHECKING:
    from collector.sources import kineto


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "convert",
        help="convert a PyTorch profiler (Kineto) JSON trace to Perfetto",
        description="Convert a PyTorch profiler (Kineto) Chrome-JSON trace (plain or .gz) into a "
        "native Perfetto trace, keeping every event (overlapping events go to sibling lanes).",
    )
    p.add_argument("input", type=Path, help="Kineto trace: .json or .json.gz")
    add_output_flag(p, "output (default: INPUT with .perfetto-trace)")
    p.add_argument(
        "--compression-level",
        type=compression_level,
        default=DEFAULT_COMPRESSION_LEVEL,
        metavar="N",
        help=f"deflate level of the trace, 0 (none) to {MAX_COMPRESSION_LEVEL} "
        f"(default {DEFAULT_COMPRESSION_LEVEL}; 10 writes a 2-7%% smaller file for ~12x the "
        "deflate work)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_quiet_flag(p)
    p.set_defaults(func=main)


def compression_level(text: str) -> int:
    """argparse type of --compression-level: an int in 0..MAX_COMPRESSION_LEVEL."""
    try:
        level = int(text)
    except ValueError:
        level = -1
    if not 0 <= level <= MAX_COMPRESSION_LEVEL:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a deflate level: pass 0 (none) to {MAX_COMPRESSION_LEVEL}"
        )
    return level


def default_output(src: Path) -> Path:
    name = src.name
    for suffix in (".gz", ".json"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return src.with_name(name + ".perfetto-trace")


def main(args: argparse.Namespace) -> int:
    # Imported here so other subcommands (record on a GPU box) never need ijson.
    from collector.sources import kineto

    src: Path = check_input(args.input, "Kineto JSON file")  # never a FIFO: it would hang
    out: Path = args.output or default_output(src)
    # Before the conversion, not after it; the same file as the input however named (the
    # default output never is: it adds .perfetto-trace).
    check_output(out, [src])
    console = Console(stderr=True, quiet=args.quiet, emoji=False)  # ":x:" in a name is text
    show_progress = not (args.no_progress or args.quiet) and sys.stderr.isatty()
    started = time.perf_counter()
    stats = kineto.ConvertStats()
    size = kineto.input_size(src)
    try:
        kineto.check_is_json(src)
        with progress_bar(console, size, show_progress) as advance:
            write_trace(
                src, out, sys.argv, stats, advance, compression_level=args.compression_level
            )
    except kineto.KinetoFormatError as exc:
        raise UserError(str(exc)) from None
    except PermissionError as exc:
        raise UserError(f"permission denied: {exc.filename}") from None
    except OSError as exc:  # the output's disk is full (the partial file is gone)
        raise UserError(f"cannot write {out}: {exc.strerror}") from None
    elapsed = time.perf_counter() - started
    print_summary(console, src, out, stats, elapsed)
    return 0


@contextlib.contextmanager
def progress_bar(
    console: Console, size: int, shown: bool
) -> Iterator[Callable[[int], None] | None]:
    """A progress bar over the input's `size` bytes where `shown`: the callback that
    advances it, else None (rich.progress is not even imported: a scripted convert's
    start-up is part of its time)."""
    if not shown:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task("convert", total=size)
        yield lambda n: progress.advance(task, n)


def write_trace(
    src: Path,
    out: Path,
    command_line: list[str],
    stats: kineto.ConvertStats,
    progress: Callable[[int], None] | None = None,
    compression_level: int = DEFAULT_COMPRESSION_LEVEL,
) -> None:
    """Convert `src` into the trace `out` (kineto_columns.py), its counts into `stats` and
    the trace's metadata; `progress` gets the input's bytes as they are read."""
    from collector.sources import kineto, kineto_columns

    head = kineto.read_head(src)
    with TraceWriter(
        out,
        command_line=command_line,
        compression_level=compression_level,
        # Deflate is 5-20% of the run (by level): on a second core, where there is one, it
        # overlaps the parsing (the same bytes; libdeflate releases the GIL).
        compress_in_thread=len(os.sched_getaffinity(0)) > 1,
    ) as writer:
        producer = writer.producer("kineto")
        events = kineto_columns.convert_columns(src, head, stats, progress)
        producer.write_all(collected_now_and_then(events))
        if head.host is not None:
            writer.set_metadata("host", head.host)
        for key, value in summary_counters(stats).items():
            writer.set_metadata(f"convert_{key}", value)


def api_device_flows(stats: kineto.ConvertStats) -> int:
    """API call -> device op flows: by correlation id, and from ac2g/async_gpu pairs."""
    from collector.sources.kineto_events import API_TO_DEVICE_FLOWS

    return stats.flows + sum(stats.flow_pairs.get(cat, 0) for cat in API_TO_DEVICE_FLOWS)


def other_pair_flows(stats: kineto.ConvertStats) -> dict[str, int]:
    """Flows of the input's other flow categories (not API->device, not fwdbwd)."""
    from collector.sources.kineto_events import API_TO_DEVICE_FLOWS

    return {
        cat: n
        for cat, n in sorted(stats.flow_pairs.items())
        if cat not in API_TO_DEVICE_FLOWS and cat != "fwdbwd"
    }


def _slug(reason: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", reason.lower()).strip("_")[:80]


def summary_counters(stats: kineto.ConvertStats) -> dict[str, int]:
    counters = {
        "events_in": stats.events_in,
        "events_out": stats.events_out,
        "kernels": stats.kernels,
        "memcpys": stats.memcpys,
        "memsets": stats.memsets,
        "syncs": stats.syncs,
        "gpu_annotations": stats.gpu_annotations,
        "api_calls": stats.api_calls,
        "cpu_slices": stats.cpu_slices,
        "instants": stats.instants,
        "flows_api_to_gpu": api_device_flows(stats),
        "flows_fwdbwd": stats.fwdbwd_flows,
        "flows_from_pairs": sum(stats.flow_pairs.values()),
        "ac2g_links_in": stats.ac2g_links_in,
        "gpu_ops_with_api": stats.gpu_ops_with_api,
        "gpu_ops_without_api": stats.gpu_ops_without_api,
        "metadata_events": stats.metadata_events,
        "skipped": sum(stats.skipped.values()),
    }
    for cat, n in other_pair_flows(stats).items():
        counters[f"flows_{_slug(cat)}"] = n
    # Every reason something was not converted, with its count (summary: the same lines).
    for reason, n in stats.skipped.items():
        counters[f"skipped_{_slug(reason)}"] = counters.get(f"skipped_{_slug(reason)}", 0) + n
    return counters


def size_ratio(in_size: int, out_size: int) -> str:
    """'4.2x smaller' or '1.3x larger': never a ratio below 1 called smaller (a tiny or
    already compressed input can give a larger trace)."""
    if out_size <= in_size:
        return f"{in_size / max(out_size, 1):.1f}x smaller"
    return f"{out_size / max(in_size, 1):.1f}x larger"


def print_summary(
    console: Console, src: Path, out: Path, stats: kineto.ConvertStats, elapsed: float
) -> None:
    """What was converted, within the console's width (COLUMNS): each fact wrapped under its
    own indent, the next commands one per line, whole (a command broken across lines cannot
    be pasted).  Categories and phases come from the input: shown with `printable`."""
    in_size = src.stat().st_size
    out_size = out.stat().st_size
    width = console.width
    shown = shlex.quote(printable(str(out)))
    head = (
        f"{printable(str(out))}  ({out_size / 1e6:.2f} MB, {size_ratio(in_size, out_size)} "
        f"than the {in_size / 1e6:.2f} MB input, {elapsed:.1f} s)"
    )
    others = "".join(f", {n} {printable(cat)}" for cat, n in other_pair_flows(stats).items())
    facts = [
        f"events in {stats.events_in}, out {stats.events_out} "
        f"(+{stats.metadata_events} metadata records, flow records become flows)",
        f"GPU: {stats.kernels} kernels, {stats.memcpys} memcpy, {stats.memsets} memset, "
        f"{stats.syncs} sync, {stats.gpu_annotations} annotations",
        f"CPU: {stats.cpu_slices} slices, {stats.api_calls} CUDA API calls, "
        f"{stats.instants} instants",
        f"flows: {api_device_flows(stats)} API->GPU (input had {stats.ac2g_links_in} ac2g "
        f"flow ends), {stats.fwdbwd_flows} fwd->bwd{others}; "
        f"GPU ops without an API call: {stats.gpu_ops_without_api}",
        *(f"skipped {n}: {printable(reason)}" for reason, n in sorted(stats.skipped.items())),
    ]
    lines = _wrap(head, width, "", "    ")
    title = Text(str(lines[0]))
    title.stylize("bold", 0, len(printable(str(out))))
    lines[0] = title
    for fact in facts:
        lines += _wrap(fact, width, "  ", "      ")
    lines += _next_commands(
        [
            (f"xpu-perf report {shown}", "the findings: what to change first"),
            (f"xpu-perf view {shown}", "the timeline in the Perfetto UI, offline"),
        ],
        width,
    )
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _wrap(text: str, width: int, first: str, rest: str) -> list[Text | str]:
    """`text` in lines of at most `width` (a word longer than a line stays whole)."""
    wrapped = textwrap.wrap(
        text,
        width=width,
        initial_indent=first,
        subsequent_indent=rest,
        break_long_words=False,
        break_on_hyphens=False,
    )
    return list(wrapped) or [first]


def _next_commands(commands: list[tuple[str, str]], width: int) -> list[Text | str]:
    """`  next: COMMAND  # what it shows`, one command a line, aligned; the comment goes
    where the line would not fit, and a command that alone does not fit gets its own line."""
    label = "  next: "
    pad = max(len(c) for c, _ in commands)
    lines: list[Text | str] = []
    for i, (command, what) in enumerate(commands):
        lead = label if i == 0 else " " * len(label)
        line = f"{lead}{command.ljust(pad)}  # {what}"
        if len(line) > width:
            line = f"{lead}{command}"
        if len(line) > width and i == 0:
            lines.append(label.rstrip())
            line = f"    {command}"
        elif len(line) > width:
            line = f"    {command}"
        lines.append(line)
    return lines
