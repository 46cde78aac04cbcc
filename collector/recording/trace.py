"""Writing the recording: every source's events through a producer of its own into one
Perfetto trace, with the counters, the --max-size cut and the capture windows as metadata
and slices that SQL reads."""

from __future__ import annotations

import socket
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from collector.recording.kept_streams import Manifest, usable_cpus
from collector.recording.python_names import PythonNames
from collector.recording.size_limit import SizeLimit
from collector.recording.source import (
    DescribedSource,
    NotedSource,
    RecordSource,
    SizedSource,
    WindowedSource,
    WindowFollower,
    process_accounts,
)
from collector.recording.track_names import TrackNames
from collector.recording.windows import CapturePlan, TreeWindows
from exporters.perfetto.engine_limit import record_warning
from exporters.perfetto.writer import TraceWriter

WINDOW_CATEGORY = "xpu_perf_window"


def write_trace(
    out: Path,
    sources: Sequence[RecordSource],
    command_line: Sequence[str],
    freq: int = 0,
    capture: CapturePlan | None = None,
    size_limit: SizeLimit | None = None,
    tree: TreeWindows | None = None,
    kept: Manifest | None = None,
    check_stop: Callable[[], None] | None = None,
) -> dict[str, dict[str, int]]:
    """Every source through its own producer; counters as metadata `<source>_<counter>`
    (SQL: args key `debug.<source>_<counter>` of the `xpu_perf_metadata` slice).  `capture`:
    the window mode, written with the window count as metadata `capture_range` and
    `windows`; the windows of the injection library, else (no GPU recording, or no process
    used CUDA) those `tree` opened, as slices.  The samplers that follow the windows
    (WindowFollower) keep exactly the windows written: record and the library time the same
    --delay or signal window apart (by tens of ms on a loaded machine), and a sample kept to
    the tree's window past the library's would lie outside every window the trace shows.
    So with the GPU recorded, a sample taken while only the tree's window was open (before
    the first process initialised CUDA, after the last one ended) is dropped and counted;
    a process that never used CUDA is sampled inside the windows of those that did.
    `kept`: the manifest of a recording written later from its kept streams (its host, and
    what record knew at the end).  Every source's process and thread names go through
    TrackNames (what the Python startup hook reported, the processes' roles).
    `check_stop`: called between events, raises to stop the writing (record asked to stop:
    the partial file goes, the streams are kept)."""
    stats: dict[str, dict[str, int]] = {}
    track_names = TrackNames(
        next((s.reported() for s in sources if isinstance(s, PythonNames)), None)
    )
    warning = record_warning(sum(s.recorded_bytes() for s in sources if isinstance(s, SizedSource)))
    if warning is not None:  # said before the minutes the writing of such a trace takes
        print(warning, file=sys.stderr)
    with TraceWriter(
        out,
        command_line=command_line,
        clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
        sample_frequency_hz=freq,  # also written as metadata, read by `folded`
    ) as writer:
        written = 0  # window slices
        # Which machine: a multi-node job is one record per node, queried together later.
        writer.set_metadata("host", kept.host if kept is not None else socket.gethostname())
        # The CPUs the program could use: what tells the input-pipeline finding whether
        # more DataLoader workers have room (the CPUs its samples landed on are a lower bound).
        cpus = kept.cpu_count if kept is not None else usable_cpus()
        if cpus:
            writer.set_metadata("cpu_count", cpus)
        # The sources' windows so far; a sampler that follows the windows from record's
        # side keeps to those, else to the tree's: the ones the trace writes (see below).
        source_windows: list[model.CaptureWindow] = []
        for source in sources if tree is None else followers_last(sources):
            if tree is not None and isinstance(source, WindowFollower):
                source.keep_only(source_windows or tree.windows)
            producer = writer.producer(source.name)
            events = source.events()
            if check_stop is not None:
                events = _checked(events, check_stop)
            producer.write_all(track_names.apply(events))
            stats[source.name] = dict(source.stats())
            for key, count in stats[source.name].items():
                prefixed = key if key.startswith(f"{source.name}_") else f"{source.name}_{key}"
                writer.set_metadata(prefixed, count)
            if isinstance(source, DescribedSource):
                for key, value in source.metadata().items():
                    writer.set_metadata(key, value)
            for which, names in process_accounts([source]).get(source.name, {}).items():
                if names:  # SQL: debug.<source>_processes_<which>, 'pid N (name), ...'
                    writer.set_metadata(f"{source.name}_processes_{which}", ", ".join(names))
            if isinstance(source, NotedSource):
                for key, text in source.notes().items():
                    writer.set_metadata(f"{source.name}_{key}", text)
            if isinstance(source, WindowedSource):
                written += write_windows(writer, source.windows())
                source_windows += source.windows()
        if tree is not None and not written:
            written = write_windows(writer, tree.windows)
            stats["record"] = {"windows": written, "toggles": tree.toggles}
        if kept is not None:
            if not written:
                written = write_windows(writer, [model.CaptureWindow(**w) for w in kept.windows])
            for key, value in kept.metadata.items():
                writer.set_metadata(key, value)
        if size_limit is not None:
            for key, value in size_limit.metadata().items():
                writer.set_metadata(key, value)
        if capture is not None and capture.windowed:
            writer.set_metadata("capture_range", capture.mode)
            writer.set_metadata("windows", written)
            if tree is not None and capture.toggle_signal is not None:
                writer.set_metadata("toggles", tree.toggles)
    return stats


def followers_last(sources: Sequence[RecordSource]) -> list[RecordSource]:
    """`sources` in their order, but every window follower after the last windowed source:
    a windowed source knows its windows only once its events are read (the GPU streams),
    and a follower must know them before its own are.  record's order (the GPU source
    first) is kept as it is."""
    last = max((i for i, s in enumerate(sources) if isinstance(s, WindowedSource)), default=-1)
    head = sources[: last + 1]

    def follows(s: RecordSource) -> bool:
        return isinstance(s, WindowFollower) and not isinstance(s, WindowedSource)

    return [
        *(s for s in head if not follows(s)),
        *(s for s in head if follows(s)),
        *sources[last + 1 :],
    ]


def _checked(
    events: Iterable[model.Event], check_stop: Callable[[], None]
) -> Iterator[model.Event]:
    for event in events:
        check_stop()
        yield event


def write_windows(writer: TraceWriter, windows: Sequence[model.CaptureWindow]) -> int:
    """Each capture window as a slice named by what opened it, on the `xpu-perf` track's
    lane of its process (SQL: category `xpu_perf_window`, args `debug.reason`,
    `debug.end_reason`, `debug.pid`)."""
    for w in windows:
        writer.add_tool_slice(
            f"capture windows (pid {w.pid})",
            w.start,
            w.end - w.start,
            f"capture window ({w.reason})",
            WINDOW_CATEGORY,
            {"reason": w.reason, "end_reason": w.end_reason, "pid": w.pid},
        )
    return len(windows)
