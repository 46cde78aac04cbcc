"""`xpu-perf report --ranks`: per-rank numbers checked against the layout of
tests/rank_traces.py, computed by hand there: on a merged trace, on the unmerged traces as a
batch, and in one capture window."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .conftest import run_cli
from .rank_traces import COMM_US, EXPOSED_US, RankSpec, rank_kineto, recorded_rank_trace

SPECS = (RankSpec(0, host="node0"), RankSpec(1, host="node1", slow_us=50, skew_us=777.0))


def _expected(spec: RankSpec, steps: int) -> dict[str, int]:
    return {
        "rank": spec.rank,
        "host": spec.host,
        "gpu_busy_ns": steps * spec.busy_us() * 1000,
        "compute_ns": steps * spec.compute_us() * 1000,
        "comm_ns": steps * COMM_US * 1000,
        "comm_kernels": steps * 3,
        "exposed_comm_ns": steps * EXPOSED_US * 1000,
        "steps": steps,
        "step_mean_ns": spec.step_us() * 1000,
        "step_max_ns": spec.step_us() * 1000,
    }


def _rows(*args: object) -> tuple[list[dict], str]:
    proc = run_cli("report", "--ranks", "--format", "json", *args)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def _picked(row: dict) -> dict:
    return {k: row[k] for k in _expected(SPECS[0], 1)}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("ranks")
    outs = []
    for spec in SPECS:
        src = rank_kineto(tmp / f"r{spec.rank}.json", spec)
        out = tmp / f"r{spec.rank}.perfetto-trace"
        run_cli("convert", src, "-o", out, "-q", check=True)
        outs.append(out)
    return outs


def test_merged_trace_per_rank_numbers(converted: list[Path], tmp_path: Path) -> None:
    merged = tmp_path / "merged.perfetto-trace"
    run_cli("merge", "-o", merged, *converted, "--align", "nccl", check=True)
    rows, stderr = _rows(merged)
    assert [_picked(r) for r in rows] == [_expected(s, 4) for s in SPECS]
    assert rows[0]["exposed_pct"] == pytest.approx(100.0 * EXPOSED_US / COMM_US)
    assert rows[0]["pid"] != rows[1]["pid"]
    assert "slowest: rank 1 (node1" in stderr
    assert "mean step time 580.0 us" in stderr


def test_batch_of_traces_gives_the_same_numbers(converted: list[Path]) -> None:
    rows, stderr = _rows(*converted)
    assert [r["trace"] for r in rows] == [str(p) for p in converted]
    assert [_picked(r) for r in rows] == [_expected(s, 4) for s in SPECS]
    assert "slowest: rank 1" in stderr


def test_table_names_the_slowest_rank(converted: list[Path]) -> None:
    proc = run_cli("report", "--ranks", converted[0])
    assert proc.returncode == 0, proc.stderr
    assert "NCCL exposed" in proc.stdout and "520 µs" in proc.stdout
    # One rank: nothing to compare it with, so no "slowest ... 0.0% above" verdict.
    assert "slowest" not in proc.stdout and "one rank: no other rank" in proc.stdout


def test_without_steps_the_slowest_is_by_compute(converted: list[Path], tmp_path: Path) -> None:
    # `--steps` naming nothing is an error now (it fell back silently); traces without step
    # slices are what this is about.
    proc = run_cli("report", "--ranks", *converted, "--steps", "no such step")
    assert proc.returncode != 0 and "--steps 'no such step'" in proc.stderr
    unmarked = []
    for spec in SPECS:
        src = rank_kineto(tmp_path / f"r{spec.rank}.json", replace(spec, marked_steps=False))
        out = tmp_path / f"r{spec.rank}.perfetto-trace"
        run_cli("convert", src, "-o", out, "-q", check=True)
        unmarked.append(out)
    rows, stderr = _rows(*unmarked)
    assert all(r["steps"] == 0 and r["step_mean_ns"] is None for r in rows)
    assert "slowest: rank 1" in stderr and "compute time 1400.0 us" in stderr


def test_window_limits_the_numbers(tmp_path: Path) -> None:
    """Recorded-form traces with a capture window around steps 1..2: --window 1 counts only
    the two steps inside it, on the merged trace of both ranks (same pid on both)."""
    snap = {
        pb.BUILTIN_CLOCK_BOOTTIME: 10_000_000_000,
        pb.BUILTIN_CLOCK_MONOTONIC: 10_000_000_000,
        pb.BUILTIN_CLOCK_REALTIME: 1_780_000_000_000_000_000,
    }
    traces = [
        recorded_rank_trace(tmp_path / f"n{s.rank}.perfetto-trace", s, snap, (1, 2)) for s in SPECS
    ]
    merged = tmp_path / "merged.perfetto-trace"
    run_cli("merge", "-o", merged, *traces, check=True)
    whole, _ = _rows(merged, "--steps", "step *")
    window, _ = _rows(merged, "--steps", "step *", "--window", "1")
    assert [_picked(r) for r in whole] == [_expected(s, 4) for s in SPECS]
    assert [_picked(r) for r in window] == [_expected(s, 2) for s in SPECS]


def test_csv_and_several_traces_need_ranks(converted: list[Path]) -> None:
    # --steps serves the whole report now (its step table); csv is the rank table's only.
    proc = run_cli("report", converted[0], "--steps", "ProfilerStep#*", "--format", "json")
    assert proc.returncode == 0 and json.loads(proc.stdout)["step_source"] == "marked"
    proc = run_cli("report", converted[0], "--format", "csv")
    assert proc.returncode == 2 and "--ranks" in proc.stderr
    proc = run_cli("report", *converted)
    assert proc.returncode == 2 and "several only with --ranks" in proc.stderr


def test_analysis_steps_per_rank_on_a_merged_trace(converted: list[Path], tmp_path: Path) -> None:
    """The analysis layer on a merged trace: each rank's ProfilerStep slices are its steps,
    and each step's busy time, by kind, is that rank's own GPU work (the ranks' devices and
    processes kept apart, the skewed rank's clock aligned)."""
    from exporters.analysis import tables
    from exporters.perfetto.engine.trace_processor import open_trace
    from exporters.perfetto.engine.views import load_views

    merged = tmp_path / "merged.perfetto-trace"
    run_cli("merge", "-o", merged, *converted, "--align", "nccl", check=True)
    with open_trace(merged) as trace:
        load_views(trace)
        tables.load(trace)
        rows = trace.query(
            "select st.upid, b.dur, b.busy_ns, b.compute_ns, b.nccl_ns, b.devices, b.source "
            "from xpu_step_busy b join xpu_step st using (step) order by st.upid, b.ts"
        )
    per_rank: dict[int, list[dict]] = {}
    for r in rows:
        per_rank.setdefault(int(r["upid"]), []).append(r)
    assert len(per_rank) == len(SPECS)
    for spec, steps in zip(SPECS, per_rank.values(), strict=True):
        assert len(steps) == 4
        for s in steps:
            assert s["devices"] == 1 and s["source"] == "marked"
            assert s["dur"] == spec.step_us() * 1000
            assert s["busy_ns"] == spec.busy_us() * 1000
            assert s["compute_ns"] == spec.compute_us() * 1000
            assert s["nccl_ns"] == COMM_US * 1000
