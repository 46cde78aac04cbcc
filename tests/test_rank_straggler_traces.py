"""`report --ranks` over several per-rank traces (recorded separately, or converted per-rank
Kineto traces), each on its own clock: the straggler is still named by collective arrival
(compared by each collective's in-kernel time, which needs no clock offset), with its own
top cause and line from its trace, the verdict in --format json; `--steps` naming nothing
is an error (issue 37, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from .conftest import run_cli
from .rank_traces import RankSpec, rank_kineto, recorded_rank_trace
from .test_rank_straggler import STEPS, _job


def _json(*args: object) -> dict[int, dict]:
    res = run_cli("report", "--ranks", "--format", "json", *args)
    assert res.returncode == 0, res.stderr
    return {r["rank"]: r for r in json.loads(res.stdout)}


def test_recorded_per_rank_traces_name_the_straggler_with_its_cause(tmp_path: Path) -> None:
    # Clocks far apart: rank 1's trace starts 3.7 s after rank 0's, rank 0's is late.
    r0 = _job(tmp_path / "r0.pftrace", ranks=(0,), shift_ns=9_300_000_000)
    r1 = _job(tmp_path / "r1.pftrace", ranks=(1,), shift_ns=3_700_000_000)
    by_rank = _json(r0, r1)
    assert by_rank[1]["late_ns"] == 4_000_000 and by_rank[0]["late_ns"] == 0
    assert by_rank[1]["arrived_last"] == STEPS and by_rank[1]["collectives"] == STEPS
    assert by_rank[0]["verdict"] is None and "collective_ns" not in by_rank[0]
    verdict = by_rank[1]["verdict"]
    assert verdict.startswith("straggler: rank 1 "), verdict
    assert "other CPU work before the launch at extra_work (train.py:40)" in verdict
    assert "extra_work (train.py:40)" in by_rank[1]["cause"]
    table = " ".join(run_cli("report", "--ranks", r0, r1, check=True).stdout.split())
    assert "straggler: rank 1 (r1, pid 200)" in table and "slowest" not in table


@pytest.mark.parametrize("late", [0, 1])
def test_converted_per_rank_kineto_traces(tmp_path: Path, late: int) -> None:
    """The late rank is named whichever it is, though the other one has the longer steps
    (the waiting rank's step is the long one by mean step time)."""
    specs = [
        RankSpec(r, host=f"node{r}", skew_us=(0.0, 777.0)[r], slow_us=0 if r == late else 60)
        for r in (0, 1)
    ]
    specs[late] = RankSpec(late, host=f"node{late}", skew_us=specs[late].skew_us, nccl_late_us=30)
    traces = []
    for spec in specs:
        src = rank_kineto(tmp_path / f"r{spec.rank}.json", spec)
        out = tmp_path / f"r{spec.rank}.perfetto-trace"
        run_cli("convert", src, "-o", out, "-q", check=True)
        traces.append(out)
    by_rank = _json(*traces)
    assert by_rank[late]["late_ns"] == 30_000 and by_rank[1 - late]["late_ns"] == 0
    assert by_rank[late]["arrived_last"] == by_rank[late]["collectives"] == 4 * 3
    assert by_rank[late]["verdict"].startswith(f"straggler: rank {late} ")
    assert by_rank[1 - late]["verdict"] is None


def test_recorded_form_traces_of_two_machines(tmp_path: Path) -> None:
    """`record`'s form: each trace on its machine's monotonic clock (snapshots 2.5 s apart,
    boot times apart), rank 0's NCCL kernels starting 30 us late."""
    traces = []
    for rank, (mono, real) in enumerate(((10, 1_780_000_000), (7_500, 1_780_000_003))):
        snapshot = {
            pb.BUILTIN_CLOCK_BOOTTIME: mono * 1_000_000_000,
            pb.BUILTIN_CLOCK_MONOTONIC: mono * 1_000_000_000,
            pb.BUILTIN_CLOCK_REALTIME: real * 1_000_000_000,
        }
        spec = RankSpec(rank, host=f"node{rank}", skew_us=123.0 * rank, nccl_late_us=30 - 30 * rank)
        traces.append(recorded_rank_trace(tmp_path / f"n{rank}.pftrace", spec, snapshot))
    by_rank = _json(*traces)
    assert by_rank[0]["late_ns"] == 30_000 and by_rank[1]["late_ns"] == 0
    assert by_rank[0]["verdict"].startswith("straggler: rank 0 (")
    assert by_rank[0]["cause"] and by_rank[1]["cause"] is None


def test_steps_matching_nothing_in_a_batch_is_an_error(tmp_path: Path) -> None:
    r0 = _job(tmp_path / "r0.pftrace", ranks=(0,))
    r1 = _job(tmp_path / "r1.pftrace", ranks=(1,), ranges=False)
    res = run_cli("report", "--ranks", "--steps", "train_step", r0, r1)
    assert res.returncode != 0 and res.stdout == ""
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "--steps 'train_step'" in lines[0] and "r1.pftrace" in lines[0]
    assert "r0.pftrace" not in lines[0]
    res = run_cli("report", "--ranks", "--steps", "nothing_named_so", r0, r1)
    assert res.returncode != 0 and res.stdout == "" and len(res.stderr.strip().splitlines()) == 1
    # Named in every trace: the table.
    res = run_cli("report", "--ranks", "--steps", "train_step", r0, r0, "--format", "json")
    assert res.returncode == 0, res.stderr


def test_arrival_compares_the_collectives_every_rank_has() -> None:
    """k up to the fewest any rank has (a rank whose capture stopped early); a rank without
    NCCL kernels keeps its row as it was; one rank with kernels compares nothing."""
    from exporters.report.ranks import arrival_across_traces

    rows: list[dict[str, object]] = [
        {"trace": "a", "collective_ns": "900,500,700,100"},
        {"trace": "b", "collective_ns": "400,500,100"},
        {"trace": "c", "collective_ns": None, "late_ns": None},
    ]
    a, b, c = arrival_across_traces(rows)
    # per k: a waits 500 / 0 / 600 longer than b; b lagged at k=1 and k=3, tie at k=2.
    assert (a["late_ns"], a["arrived_last"], a["collectives"]) == (0, 0, 3)
    assert (b["late_ns"], b["arrived_last"], b["collectives"]) == (1100 // 3, 2, 3)
    assert c == rows[2]
    assert arrival_across_traces(rows[:1] + rows[2:]) == rows[:1] + rows[2:]
