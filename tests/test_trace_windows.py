"""Which capture windows the samplers that follow them keep to (collector/recording/trace.py):
exactly the windows the trace writes.  record times its own tree window (--delay, the toggle
signal) and the injection library times its windows inside the target; on a loaded machine the
two end tens of ms apart, and a sample kept to the one the trace does not show lies outside
every window it does show.  Sources written here by hand, through write_trace, read back with
trace_processor."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path

import pytest

from collector import model
from collector.recording.source import FinishedRun, RecordSource, WindowFollower
from collector.recording.trace import write_trace
from collector.recording.windows import DELAY, CapturePlan, TreeWindows
from collector.window_control import WindowState
from collector.window_spans import inside, window_spans
from exporters.perfetto.engine.trace_processor import open_trace

from .test_capture_windows import windows
from .test_cupti_fake import metadata

MS = 1_000_000
T0 = 10_000 * MS  # the run's start on CLOCK_MONOTONIC
TREE_PID = 100  # record's target, whose tree window record times
GPU_PID = 101  # the process whose injection library timed its own window
SAMPLES_MS = (100, 500, 800)
COUNTER = "follower samples"


class GpuStreams(FinishedRun):
    """A windowed source as the GPU recording is one: its windows are known once its
    streams are read (events()), not before."""

    name = "gpu"

    def __init__(self, window_ms: tuple[int, int] | None) -> None:
        self._window_ms = window_ms
        self._read = False

    def events(self) -> Iterator[model.Event]:
        self._read = True
        yield model.GpuDevice(0, "Test GPU")

    def stats(self) -> Mapping[str, int]:
        return {}

    def windows(self) -> Sequence[model.CaptureWindow]:
        if not self._read or self._window_ms is None:
            return []
        start, end = self._window_ms
        return [model.CaptureWindow(GPU_PID, T0 + start * MS, T0 + end * MS, DELAY, "duration")]


class Follower(FinishedRun):
    """A sampler that follows the windows as record's do: keeps the samples inside the
    windows keep_only gives, and counts the others."""

    name = "follower"

    def __init__(self) -> None:
        self._spans: list[tuple[int, int]] | None = None
        self._outside = 0

    def follow_windows(self, windows: WindowState) -> None:
        pass

    def keep_only(self, windows: Sequence[model.CaptureWindow]) -> None:
        self._spans = window_spans(windows)

    def events(self) -> Iterable[model.Event]:
        ts = [T0 + ms * MS for ms in SAMPLES_MS]
        if self._spans is not None:
            starts = [start for start, _ in self._spans]
            kept = [t for t in ts if inside(self._spans, starts, t)]
            self._outside += len(ts) - len(kept)
            ts = kept
        yield model.GpuDevice(0, "Test GPU")
        yield model.GpuCounterSeries(0, COUNTER, "%", ts, [50.0] * len(ts))

    def stats(self) -> Mapping[str, int]:
        return {"samples_outside_window": self._outside}


def recorded(tmp_path: Path, sources: Sequence[RecordSource]) -> dict[str, object]:
    """write_trace under --delay, with record's tree window [0, 1000 ms]; what the trace
    holds: its window slices (ms from T0), the follower's samples and outside count."""
    assert any(isinstance(s, WindowFollower) for s in sources)
    plan = CapturePlan(DELAY, {}, delay_s=0.0, duration_s=1.0)
    tree = TreeWindows(plan)
    try:
        tree.windows.append(model.CaptureWindow(TREE_PID, T0, T0 + 1000 * MS, DELAY, "duration"))
        out = tmp_path / "windows.perfetto-trace"
        write_trace(out, sources, ["test"], capture=plan, tree=tree)
    finally:
        tree.close()
    with open_trace(out) as t:
        found = windows(t)
        # trace_processor reads CLOCK_MONOTONIC onto its boot-time clock: every window
        # starts at T0 here, so the first one's start is T0 in the trace.
        t0 = found[0]["ts"]
        return {
            "windows": [((w["ts"] - t0) // MS, (w["ts"] + w["dur"] - t0) // MS) for w in found],
            "window_count": metadata(t, "windows"),
            "samples": [
                (r["ts"] - t0) // MS
                for r in t.query(
                    "select c.ts from counter c join track tr on tr.id = c.track_id "
                    f"where tr.name = '{COUNTER}' order by c.ts"
                )
            ],
            "outside": metadata(t, "follower_samples_outside_window"),
        }


@pytest.mark.parametrize("follower_first", [False, True])
def test_followers_keep_the_library_windows_the_trace_writes(
    tmp_path: Path, follower_first: bool
) -> None:
    """The library's window [0, 600 ms] is the one written (not the tree's [0, 1000 ms]):
    the sample at 800 ms is outside it, dropped and counted, whichever source comes first."""
    gpu: RecordSource = GpuStreams((0, 600))
    follower: RecordSource = Follower()
    got = recorded(tmp_path, [follower, gpu] if follower_first else [gpu, follower])
    assert got["windows"] == [(0, 600)]
    assert got["window_count"] == 1
    assert got["samples"] == [100, 500]
    assert got["outside"] == 1


def test_without_library_windows_followers_keep_the_tree_windows(tmp_path: Path) -> None:
    """No process used CUDA (no library window): the tree's window is written and kept to."""
    got = recorded(tmp_path, [GpuStreams(None), Follower()])
    assert got["windows"] == [(0, 1000)]
    assert got["window_count"] == 1
    assert got["samples"] == list(SAMPLES_MS)
    assert got["outside"] == 0
