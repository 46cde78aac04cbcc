"""`report`, `folded` and `flamegraph --window N` read one capture window of a trace that
holds several: a trace recorded against the fake CUPTI with two cudaProfilerApi windows
(tests/test_capture_windows.py), read back through the CLI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from collector.inject_build import BuildError
from exporters.analysis.tables import Scope
from exporters.folded.folded import fold
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.report.queries import collect

from .fake_cupti.build import FakeCupti, build_fake
from .test_capture_windows import FIRST_WINDOW_KERNELS, SECOND_WINDOW, WINDOW_LAUNCHES
from .test_cupti_fake import (
    REPO,
    pytestmark,  # noqa: F401 (skips where the CUPTI headers are missing)
    record,
)


@pytest.fixture(scope="module")
def two_windows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("windows")
    try:
        fake: FakeCupti = build_fake(tmp / "fake")
    except (BuildError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot build the fake CUPTI: {exc}")
    out = tmp / "two.perfetto-trace"
    flags = ("--capture-range", "cudaProfilerApi", "--capture-range-end", "repeat")
    proc = record(fake, out, fake.app, WINDOW_LAUNCHES, 4, "profiler", flags=flags)
    assert proc.returncode == 4, proc.stderr
    assert "capture windows (cudaProfilerApi): 2" in proc.stderr
    return out


def cli(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def gpu_kernels(folded_text: str) -> dict[str, int]:
    """Kernel name -> the total weight (ns) of its folded GPU lines."""
    weights: dict[str, int] = {}
    for line in folded_text.splitlines():
        stack, weight = line.rsplit(" ", 1)
        leaf = stack.rsplit(";", 1)[-1]
        if leaf.startswith("[GPU_Kernel]"):
            name = leaf.removeprefix("[GPU_Kernel]")
            weights[name] = weights.get(name, 0) + int(weight)
    return weights


def kernel_counts(trace: Path, window: int | None) -> dict[str, int]:
    with open_trace(trace) as t:
        report = collect(t, trace.name, top=50, window=window)
    (kernels,) = [s for s in report.sections if s.key == "kernels"]
    return {r["name"]: r["count"] for r in kernels.rows}


def test_report_window_holds_exactly_that_windows_kernels(two_windows: Path) -> None:
    assert kernel_counts(two_windows, 1) == FIRST_WINDOW_KERNELS
    assert kernel_counts(two_windows, 2) == {"second_window_kernel": SECOND_WINDOW}
    assert kernel_counts(two_windows, None) == {
        **FIRST_WINDOW_KERNELS,
        "second_window_kernel": SECOND_WINDOW,
    }


def test_report_window_counts_its_api_calls_and_says_which_window(two_windows: Path) -> None:
    with open_trace(two_windows) as t:
        report = collect(t, two_windows.name, window=2)
    (api,) = [s for s in report.sections if s.key == "cuda_api"]
    assert {r["name"]: r["calls"] for r in api.rows} == {"cuLaunchKernel": SECOND_WINDOW}
    facts = dict(report.facts)
    assert "cudaProfilerApi in 1 process" in facts["capture window 2"]
    assert "2 per process at most" in facts["capture window 2"]
    # Utilisation is over the window's active span (its first op to the end of its last),
    # or with --span all the whole window (to the end of its last op), never the trace.
    with open_trace(two_windows) as t:
        whole = collect(t, two_windows.name, scope=Scope(span_all=True))
        start, end = t.query(
            "select s.ts, s.ts + s.dur as end_ts from slice s "
            "where s.category = 'xpu_perf_window' order by s.ts"
        )[1].values()
        first_op, last_op = t.query(
            "select min(ts) as a, max(ts + dur) as b from slice where name = 'second_window_kernel'"
        )[0].values()
    with open_trace(two_windows) as t:
        window_all = collect(t, two_windows.name, window=2, scope=Scope(span_all=True))
    assert "trace duration" in dict(whole.facts)
    assert (report.timeline.t0, report.timeline.dur_ns) == (first_op, last_op - first_op)
    assert window_all.timeline.t0 == start
    assert window_all.timeline.dur_ns == max(end, last_op) - start < whole.timeline.dur_ns


def test_folded_window_splits_the_gpu_time(two_windows: Path) -> None:
    with open_trace(two_windows) as t:
        whole = fold(t, "gpu").render()
    first, second = (cli("folded", "--mode", "gpu", "--window", n, two_windows) for n in "12")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    w1, w2, all_ = gpu_kernels(first.stdout), gpu_kernels(second.stdout), gpu_kernels(whole)
    assert set(w1) == set(FIRST_WINDOW_KERNELS)
    assert set(w2) == {"second_window_kernel"}
    # The two windows are all the trace holds: their weights add up to the whole trace's.
    assert {**w1, **w2} == all_
    # The long kernel launched inside window 1 but ending after it counts in window 1.
    assert w1["long_window_kernel"] > 0


def test_flamegraph_and_report_take_window(two_windows: Path, tmp_path: Path) -> None:
    svg = tmp_path / "w2.svg"
    proc = cli("flamegraph", "--mode", "gpu", "--window", "2", "-o", svg, two_windows)
    assert proc.returncode == 0, proc.stderr
    text = svg.read_text()
    # The frames' tooltips (`[GPU_Kernel]NAME` then the weight): labels show the name alone.
    assert "[GPU_Kernel]second_window_kernel\n" in text
    assert "]window_kernel\n" not in text and "long_window_kernel" not in text
    assert "capture window 2" in text
    proc = cli("report", "--window", "1", two_windows)
    assert proc.returncode == 0, proc.stderr
    assert "capture window 1" in proc.stdout and "second_window_kernel" not in proc.stdout


@pytest.mark.parametrize("command", ["report", "folded", "flamegraph"])
def test_window_out_of_range_is_a_one_line_error(
    two_windows: Path, tmp_path: Path, command: str
) -> None:
    extra = ("-o", tmp_path / "x.svg") if command == "flamegraph" else ()
    proc = cli(command, "--window", "3", *extra, two_windows)
    assert proc.returncode != 0
    assert "2 capture windows per process at most; --window takes 1..2" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.svg").exists()
    proc = cli(command, "--window", "0", *extra, two_windows)
    assert proc.returncode != 0 and "--window counts from 1" in proc.stderr


def test_window_of_a_trace_without_windows_is_a_one_line_error(tmp_path: Path) -> None:
    trace = tmp_path / "example.perfetto-trace"
    proc = cli("convert", REPO / "bench/data/example_kineto.json.gz", "-o", trace)
    assert proc.returncode == 0, proc.stderr
    proc = cli("folded", "--window", "1", trace)
    assert proc.returncode != 0
    assert "has no capture windows" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
