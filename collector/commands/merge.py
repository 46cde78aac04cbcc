"""`xpu-perf merge -o OUT TRACE...`: one trace out of per-node or per-rank traces."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from collector.commands.flags import add_output_flag, add_quiet_flag, add_trace_processor_flag
from collector.errors import UserError
from collector.visible_text import printable

if TYPE_CHECKING:
    from collector.merge.nccl import Spread
    from collector.merge.traces import MergeReport

# Also in collector.merge.clocks (not imported here: --help loads no protos).
ALIGN_MODES = ("clock", "nccl", "none")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "merge",
        help="merge per-node / per-rank traces into one",
        description="Merge traces of the nodes (or ranks) of one job into one trace: every "
        "slice, flow, sample, stack and every input's metadata kept; processes, threads, "
        "tracks and flows of different inputs kept apart (each process labelled with its "
        "host); inputs aligned by their wall clocks. The inputs are streamed: memory does "
        "not grow with their number or size.",
    )
    p.add_argument("traces", nargs="+", type=Path, metavar="TRACE", help="input traces")
    add_output_flag(p, "the merged trace", required=True)
    p.add_argument(
        "--align",
        choices=ALIGN_MODES,
        default="clock",
        help="clock: by each trace's REALTIME clock snapshot (default); nccl: then line up "
        "the ends of the same NCCL collectives across inputs; none: keep every input's times",
    )
    add_quiet_flag(p)
    add_trace_processor_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # Imported here: `merge --help` needs neither the protos nor the query engine.
    from collector.merge.traces import merge_traces

    console = Console(stderr=True, quiet=args.quiet, emoji=False)  # ":x:" in a name is text
    started = time.perf_counter()
    try:
        report = merge_traces(
            args.traces,
            args.output,
            align=args.align,
            shell=args.trace_processor,
            command_line=sys.argv,
        )
    except PermissionError as exc:
        raise UserError(f"permission denied: {exc.filename}") from None
    print_summary(console, report, time.perf_counter() - started)
    return 0


def _ns(value: int | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1_000_000:
        return f"{value / 1e6:.3f} ms"
    return f"{value / 1e3:.1f} us"


def _spread(s: Spread) -> str:
    if s.median_ns is None:
        return "no collective found in every input"
    return f"median {_ns(s.median_ns)}, max {_ns(s.max_ns)} over {s.collectives} collectives"


_CLOCK_SOURCES = {
    "realtime": "by its REALTIME clock snapshot",
    "wall_clock_timestamps": "its timestamps are wall clock",
    "none": "no REALTIME clock snapshot: not aligned by clock",
}


def print_summary(console: Console, report: MergeReport, elapsed: float) -> None:
    # Paths, labels and packet kinds come from the inputs: shown with `printable`, and
    # escaped, since these lines are rich markup.
    out = escape(printable(str(report.output)))
    size = report.bytes_written / 1e6
    console.print(f"{out}  ({size:.2f} MB, {len(report.inputs)} inputs, {elapsed:.1f} s)")
    deltas = report.nccl.deltas if report.nccl is not None else None
    for i, inp in enumerate(report.inputs):
        c = inp.counts
        offset = f"offset {_ns(inp.offset_ns)}"
        if deltas is not None:
            offset += f" (NCCL moved it {_ns(deltas[i])})"
        moved = f"; {len(inp.pids_moved)} pids/tids moved" if inp.pids_moved else ""
        label = escape(printable(f"[{inp.label}]"))
        console.print(
            f"  input {i} {label} {escape(printable(str(inp.path)))}: {offset}, "
            f"{_CLOCK_SOURCES[inp.clock_source]}; {c['slices']} slices, {c['flow_ids']} "
            f"flows, {c['samples.cpu-clock']} CPU samples, "
            f"{c['samples.xpu_perf.launch_stack']} launch stacks{moved}"
        )
        others = {k: n for k, n in c.items() if k.startswith("other_packets.")}
        if others:
            console.print(escape(printable(f"    kept as they are (not remapped): {others}")))
    if report.nccl is not None:
        n = report.nccl
        if n.reference is None:
            console.print("  nccl: no NCCL kernels in any input; clock offsets kept")
        else:
            console.print(
                f"  nccl: reference input {n.reference}; kernels per input {n.kernels}, "
                f"collectives matched with the reference {n.matched}"
            )
            console.print(f"  NCCL end spread before: {_spread(n.before)}")
            console.print(f"  NCCL end spread after:  {_spread(n.after)}")
    console.print(
        f"  total: {report.total('slices')} slices, {report.total('flow_ids')} flows, "
        f"{report.total('packets_in')} packets; replaced: "
        f"{report.total('clock_snapshots_replaced')} input clock snapshots (by the merged "
        "trace's)"
    )
