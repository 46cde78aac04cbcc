"""`report --ranks` on one trace of a 2-rank job (as recorded around torchrun) where rank 1
does 4 ms of extra host work before each allreduce: the straggler is named by collective
arrival (rank 1's allreduce starts last; rank 0's NCCL time is waiting), with its own top
cause and line from the same analysis as `report`, its steps from its repeating range, and
the verdict in --format json (issue 37, items 4 and 7)."""

from __future__ import annotations

import json
from pathlib import Path

from collector import model
from collector.model import Frame, Stack
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from .analysis_traces import HZ, PERIOD, _py
from .conftest import run_cli

NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
BASE = (Frame("_start", "/usr/bin/python3.11"), _py("<module>", 90), _py("train", 60))
LAUNCH = Stack((*BASE, _py("forward", 44), Frame("cudaLaunchKernel", "libcudart")))
EXTRA = Stack((*BASE, _py("extra_work", 40), Frame("memmove", "/lib/libc.so.6")))
STEPS, STEP_NS = 12, 10_000_000


def _job(
    path: Path, ranges: bool = True, ranks: tuple[int, ...] = (0, 1), shift_ns: int = 0
) -> Path:
    """The job's trace; `ranks`: the ranks it holds (one for a per-rank trace), `shift_ns`:
    added to every time (a per-rank trace's own clock)."""
    events: list[model.Event] = [
        model.GpuDevice(0, "NVIDIA H200"),
        model.GpuDevice(1, "NVIDIA H200"),
    ]
    corr = [0]

    def launch(pid: int, ts: int, dev: int, kts: int, kend: int, name: str) -> None:
        corr[0] += 1
        flow = model.flow_id(pid, corr[0])
        events.append(
            model.CpuSlice(
                pid,
                pid,
                ts,
                5_000,
                "cudaLaunchKernel",
                model.CAT_CUDA_API,
                {"correlation_id": corr[0]},
                flow_ids=(flow,),
                launch_stack=LAUNCH,
            )
        )
        events.append(
            model.GpuOp(
                dev,
                7 if name.startswith("gemm") else 20,
                kts,
                kend - kts,
                name,
                model.CAT_KERNEL,
                {"correlation_id": corr[0]},
                correlation_id=corr[0],
                terminating_flow_ids=(flow,),
            )
        )

    for rank, pid in ((0, 100), (1, 200)):
        if rank not in ranks:
            continue
        events += [
            model.ranked_process(pid, "python3", ("python3", "train.py"), rank, rank, 2),
            model.ThreadInfo(pid, pid, "python3"),
        ]
        for step in range(STEPS):
            base = 1_000_000_000 + step * STEP_NS + shift_ns
            if ranges:
                events.append(model.CpuSlice(pid, pid, base, 6_000_000, "train_step", "nvtx"))
            launch(pid, base, rank, base + 20_000, base + 1_020_000, "gemm_fwd")
            if rank == 0:
                launch(pid, base + 1_100_000, rank, base + 1_120_000, base + 5_700_000, NCCL)
            else:
                ts = base + 1_050_000
                while ts <= base + 5_050_000:
                    events.append(model.CpuSample(pid, pid, ts, EXTRA))
                    ts += PERIOD
                launch(pid, base + 5_100_000, rank, base + 5_120_000, base + 5_700_000, NCCL)
    with TraceWriter(path, sample_frequency_hz=HZ) as w:
        w.producer("p").write_all(batched(sorted(events, key=lambda e: getattr(e, "ts", 0))))
    return path


def test_straggler_by_collective_arrival_with_its_own_cause(tmp_path: Path) -> None:
    path = _job(tmp_path / "ddp.pftrace")
    res = run_cli("report", "--ranks", "--format", "json", path, check=True)
    rows = json.loads(res.stdout)
    by_rank = {r["rank"]: r for r in rows}
    assert by_rank[1]["late_ns"] == 4_000_000 and by_rank[0]["late_ns"] == 0
    assert by_rank[1]["arrived_last"] == STEPS and by_rank[0]["verdict"] is None
    verdict = by_rank[1]["verdict"]
    assert verdict.startswith("straggler: rank 1 ")
    assert "the other ranks wait for it in NCCL" in verdict
    assert "other CPU work before the launch at extra_work (train.py:40)" in verdict
    # The same steps as `report`: the repeating range on each rank.
    assert by_rank[0]["steps"] == by_rank[1]["steps"] == STEPS
    table = " ".join(run_cli("report", "--ranks", path, check=True).stdout.split())
    assert "straggler: rank 1 " in table and "extra_work (train.py:40)" in table
    assert "slowest" not in table


def test_one_process_has_no_slowest(tmp_path: Path) -> None:
    from .analysis_traces import write

    path = tmp_path / "one.pftrace"
    write(path, "host")
    out = run_cli("report", "--ranks", path, check=True).stdout
    assert "slowest" not in out and "0.0% above" not in out
    assert "one rank: no other rank to compare with" in " ".join(out.split())


def test_unmarked_steps_are_detected_per_rank(tmp_path: Path) -> None:
    """No range marks the steps: each rank's launch sequence is its own (both ranks get
    their steps, not only the one that launches most)."""
    from exporters.analysis.analyze import analyze
    from exporters.perfetto.engine.trace_processor import open_trace

    path = _job(tmp_path / "ddp.pftrace", ranges=False)
    with open_trace(path) as t:
        analyze(t)
        per_rank = {
            int(r["pid"]): int(r["n"])
            for r in t.query(
                "select p.pid, count(*) as n from xpu_step s join process p using (upid) "
                "group by p.pid"
            )
        }
    assert set(per_rank) == {100, 200}
    assert all(abs(n - STEPS) <= 1 for n in per_rank.values())
    rows = json.loads(run_cli("report", "--ranks", "--format", "json", path, check=True).stdout)
    assert all(abs(r["steps"] - STEPS) <= 1 for r in rows)


def test_plain_report_says_which_rank_a_finding_is_of(tmp_path: Path) -> None:
    """`report` on the same trace: the host work between launches is rank 1's."""
    from exporters.analysis.analyze import analyze
    from exporters.perfetto.engine.trace_processor import open_trace

    path = _job(tmp_path / "ddp.pftrace")
    with open_trace(path) as t:
        found = {f.code: f for f in analyze(t).findings}
    host = found["PYTHON_BETWEEN_LAUNCHES"]
    assert host.locations[0] == "extra_work (train.py:40)"
    assert host.title.endswith("(rank 1: 100% of it)")
