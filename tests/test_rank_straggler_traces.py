"""`report --ranks` over several per-rank traces (recorded separately, or converted per-rank
Kineto traces), each on its own clock: the straggler is still named by collective arrival
(compared by each collective's in-kernel time, which needs no clock offset), with its own
top cause and line from its trace, the verdict in --format json; `--steps` naming nothing
is an error (issue 37, item 4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import run_cli
from .rank_traces import RankSpec, rank_kineto
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
