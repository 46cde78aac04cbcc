"""One scope (issue 35): `folded`, `flamegraph` and the report's flamegraph cover the span the
findings cover by default (the steady-state steps), say so, and take `--span
steps|active|all`; `folded --mode idle` weighs exactly the idle the report counts, with its
frames read as the other modes read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from . import analysis_traces
from .conftest import REPO, run_cli


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("span")
    stepped = tmp / "launch_bound_stack.perfetto-trace"
    run_cli(
        "convert",
        REPO / "bench/data/kineto_launch_bound_stack.json.gz",
        "-o",
        stepped,
        "-q",
        check=True,
    )
    out = {"kineto": stepped}
    for name in ("host", "sync", "data"):
        out[name] = tmp / f"{name}.pftrace"
        analysis_traces.write(out[name], name)
    return out


def _focus(path: Path) -> dict:
    proc = run_cli("report", path, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _total(text: str) -> int:
    return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines())


def _gpu_ns(path: Path, lo: int | None = None, hi: int | None = None) -> int:
    where = "" if lo is None else f" and ts >= {lo} and ts < {hi}"
    with open_trace(path) as t:
        return int(
            t.scalar(
                "select sum(dur) from slice where category in ('kernel', 'memcpy', 'memset')"
                + where
            )
        )


def test_folded_covers_the_findings_span_by_default(traces: dict[str, Path]) -> None:
    path = traces["kineto"]
    span = _focus(path)["span"]
    assert span["focus"] == "steps"
    lo, hi = span["focus_ts"], span["focus_ts"] + span["focus_dur_ns"] + 1
    proc = run_cli("folded", path, "--mode", "gpu")
    assert proc.returncode == 0, proc.stderr
    assert _total(proc.stdout) == _gpu_ns(path, lo, hi) < _gpu_ns(path)
    assert "over steps 2-50, the steady state the findings cover" in proc.stderr
    whole = run_cli("folded", path, "--mode", "gpu", "--span", "all")
    assert _total(whole.stdout) == _gpu_ns(path) and "the whole trace" in whole.stderr
    active = run_cli("folded", path, "--mode", "gpu", "--span", "active")
    assert _total(active.stdout) == _gpu_ns(path)  # every op is in the active span
    assert "the active span" in active.stderr


def test_idle_mode_weighs_the_reports_idle(traces: dict[str, Path], tmp_path: Path) -> None:
    for name in ("kineto", "host", "sync", "data"):
        path = traces[name]
        idle_ns = _focus(path)["idle"]["idle_ns"]
        out = tmp_path / f"{name}.folded"
        proc = run_cli("folded", path, "--mode", "idle", "-o", out)
        assert proc.returncode == 0, proc.stderr
        # Rounded per line: within a nanosecond a line.
        lines = out.read_text().splitlines()
        assert abs(_total(out.read_text()) - idle_ns) <= len(lines), name
        assert "GPU 0.000 ms" not in proc.stderr and "0 CPU samples" not in proc.stderr
        assert "GPU idle" in proc.stderr and "over " in proc.stderr


def test_idle_mode_frames_read_as_the_cpu_modes(traces: dict[str, Path]) -> None:
    """CPython's start-up and evaluation frames (`_start`, `_PyEval_EvalFrameDefault`) go
    as in `--mode cpu`; --all-frames keeps them."""
    path = traces["host"]
    cpu = run_cli("folded", path, "--mode", "cpu").stdout
    idle = run_cli("folded", path, "--mode", "idle").stdout
    assert idle and cpu
    for text in (cpu, idle):
        assert "_start" not in text and "_PyEval_EvalFrameDefault" not in text
        assert "augment (train.py:77)" in text
    every = run_cli("folded", path, "--mode", "idle", "--all-frames").stdout
    assert "_start;_PyEval_EvalFrameDefault" in every


def test_flamegraph_and_report_say_their_span(traces: dict[str, Path], tmp_path: Path) -> None:
    path = traces["kineto"]
    svg = tmp_path / "g.svg"
    proc = run_cli("flamegraph", path, "-o", svg, "--mode", "gpu")
    assert proc.returncode == 0, proc.stderr
    assert "over steps 2-50, the steady state the findings cover" in svg.read_text()
    from exporters.report.queries import collect

    with open_trace(path) as t:
        report = collect(t, path.name)
    span = report.analysis.span  # type: ignore[union-attr]
    lo, hi = span.focus_ts, span.focus_ts + span.focus_dur + 1
    assert report.flame is not None
    gpu = sum(w for s, w in report.flame.lines if "[GPU_" in s.rsplit(";", 1)[-1])
    assert gpu == _gpu_ns(path, lo, hi)
    assert "steady state the findings cover" in report.flame_note


def test_report_takes_the_same_spans(traces: dict[str, Path]) -> None:
    from exporters.report.queries import collect

    path = traces["kineto"]
    with open_trace(path) as t:
        report = collect(t, path.name, flame_span="active")
    assert report.flame is not None
    gpu = sum(w for s, w in report.flame.lines if "[GPU_" in s.rsplit(";", 1)[-1])
    assert gpu == _gpu_ns(path) and "over the active span" in report.flame_note
    for span in ("steps", "active", "all"):
        proc = run_cli("report", path, "--span", span, "--format", "json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["span"]["kind"] == ("all" if span == "all" else "active")


@pytest.mark.parametrize("name", ["kineto", "data"])
def test_span_is_found_without_the_gaps(traces: dict[str, Path], name: str) -> None:
    """The span the stacks cover needs the steps, not the gaps (tables.load_steps): none of
    the gaps' tables is built for it, and the analysis built after it on the same engine (as
    `folded --mode idle` and `report --annotate` do) finds what it finds alone."""
    from exporters.analysis.analyze import analyze
    from exporters.report.scope import stack_span

    with open_trace(traces[name]) as t:
        span = stack_span(t, "steps")
        built = {r["name"] for r in t.query("select name from sqlite_master")}
        assert "xpu_step" in built and "xpu_analysis_focus" in built
        assert not {"xpu_gpu_gap", "xpu_focus_gap", "_xpu_op_opening"} & built
        after = analyze(t)
    with open_trace(traces[name]) as t:
        alone = analyze(t)
    assert span.between == (alone.span.focus_ts, alone.span.focus_ts + alone.span.focus_dur)
    assert after.to_json() == alone.to_json()
