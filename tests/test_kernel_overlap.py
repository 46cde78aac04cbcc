"""xpu_kernel_overlap (exporters/analysis/launches.sql) as a sweep over island edges gives
the rows the pairwise definition gives: for each device and other kind (nccl, memcpy,
memset), the sum over (compute island, other island) pairs that overlap of their common
time, a row wherever one pair overlaps (islands last > 0 ns: ops of 0 ns make none).
The pairwise join (with a `longest` bound the planner evaluated per row) was 7 of report's
9 s on a 100k-slice trace (issue 24); the sweep is one sort."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from collector import model
from exporters.analysis.analyze import load_for_query as load_analysis
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from .conftest import REPO, run_cli

# The definition (the table as it was before the sweep).
PAIRWISE = """
WITH compute AS (SELECT * FROM xpu_analysis_busy_island WHERE kind = 'compute'),
other AS (SELECT * FROM xpu_analysis_busy_island WHERE kind IN ('nccl', 'memcpy', 'memset'))
SELECT c.device_track_id, o.kind, sum(min(c.end_ts, o.end_ts) - max(c.ts, o.ts)) AS overlap_ns
FROM compute c JOIN other o ON o.device_track_id = c.device_track_id
  AND o.ts < c.end_ts AND o.end_ts > c.ts
GROUP BY c.device_track_id, o.kind
"""
SWEEP = "SELECT device_track_id, kind, overlap_ns FROM xpu_kernel_overlap"
PID = TID = 77


def _ops(seed: int) -> list[model.Event]:
    """Two devices, two streams each; ops of every kind that overlap, touch, nest and
    last 0 ns, each launched by an API call so the analysis span sees them."""
    rng = random.Random(seed)
    events: list[model.Event] = [
        model.ProcessInfo(PID, "python3", ("python3",)),
        model.ThreadInfo(PID, TID, "python3"),
        model.GpuDevice(0, "GPU A"),
        model.GpuDevice(1, "GPU B"),
        model.GpuDevice(2, "GPU C"),
    ]
    kinds = [
        ("gemm", model.CAT_KERNEL),
        ("ncclDevKernel_AllReduce", model.CAT_KERNEL),
        ("Memcpy HtoD", model.CAT_MEMCPY),
        ("Memset", model.CAT_MEMSET),
    ]
    t = 1_000_000
    for corr in range(1, 400):
        if corr < 5:  # device 2: ops that touch or last 0 ns, alone
            name, category, start, dur = [
                ("gemm", model.CAT_KERNEL, 0, 100),
                ("Memset", model.CAT_MEMSET, 50, 0),  # 0 ns: no island (dur > 0 only)
                ("Memcpy HtoD", model.CAT_MEMCPY, 100, 100),  # touches the end: no row
                ("ncclDevKernel_AllReduce", model.CAT_KERNEL, -100, 100),  # the start: none
            ][corr - 1]
            flow = model.flow_id(PID, corr)
            events.append(
                model.CpuSlice(
                    PID,
                    TID,
                    t + start - 2,
                    1,
                    "cudaLaunchKernel",
                    model.CAT_CUDA_API,
                    {"correlation_id": corr},
                    flow_ids=(flow,),
                )
            )
            events.append(
                model.GpuOp(
                    2,
                    0,
                    t + start,
                    dur,
                    name,
                    category,
                    {"correlation_id": corr},
                    correlation_id=corr,
                    terminating_flow_ids=(flow,),
                )
            )
            continue
        t += rng.choice([0, 5, 50, 500])
        name, category = rng.choice(kinds)
        dur = rng.choice([0, 0, 10, 100, 1000, 5000])
        flow = model.flow_id(PID, corr)
        events.append(
            model.CpuSlice(
                PID,
                TID,
                t,
                1,
                "cudaLaunchKernel",
                model.CAT_CUDA_API,
                {"correlation_id": corr},
                flow_ids=(flow,),
            )
        )
        events.append(
            model.GpuOp(
                rng.randrange(2),
                rng.randrange(2),
                t + 2,
                dur,
                name,
                category,
                {"correlation_id": corr},
                correlation_id=corr,
                terminating_flow_ids=(flow,),
            )
        )
    return sorted(events, key=lambda e: int(getattr(e, "ts", 0)))


def _rows(path: Path) -> tuple[list[tuple[object, ...]], list[tuple[object, ...]]]:
    with open_trace(path) as t:
        load_views(t)
        load_analysis(t)
        return t.query_columns(PAIRWISE)[1], t.query_columns(SWEEP)[1]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sweep_equals_pairwise_on_random_ops(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "ops.perfetto-trace"
    with TraceWriter(path) as writer:
        writer.producer("cupti").write_all(batched(_ops(seed)))
    pairwise, sweep = _rows(path)
    assert len(pairwise) >= 4  # both devices, several kinds; none of device 2
    assert sweep == pairwise


def test_sweep_equals_pairwise_on_an_outside_trace(tmp_path: Path) -> None:
    path = tmp_path / "t.perfetto-trace"
    kineto = REPO / "tests/data/kineto_outside/mtia_inference_rank_0.json.gz"
    run_cli("convert", kineto, "-o", path, check=True)
    pairwise, sweep = _rows(path)
    assert pairwise  # its copies overlap its kernels
    assert sweep == pairwise
