"""xpu_stream_queue's running sum (numpy) against the definition: at each launch, the ops
of its stream launched up to it and not ended by then (an end at the launch's time has
ended)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from exporters.analysis import analyze
from exporters.analysis.stream_queue import depth_per_stream
from exporters.perfetto.engine.trace_processor import open_trace


def _reference(ops: list[tuple[int, int, int]]) -> list[tuple[int, int, float, int]]:
    out = []
    for s in sorted({o[0] for o in ops}):
        mine = sorted((o[1], o[2]) for o in ops if o[0] == s)
        depths = []
        for i, (launch, _) in enumerate(mine):
            launched = i + 1  # ties in launch time: any order gives the same max and mean
            ended = sum(1 for _, end in mine if end <= launch)
            depths.append(launched - ended)
        out.append((s, max(depths), sum(depths) / len(depths), len(depths)))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_depth_is_launched_and_not_ended(seed: int) -> None:
    rng = random.Random(seed)
    ops = []
    for _ in range(300):
        launch = rng.randrange(0, 2000, rng.choice([1, 50]))  # steps of 50: equal times
        ops.append((rng.randrange(4), launch, launch + rng.choice([0, 50, rng.randrange(400)])))
    stream, launch, end = (np.array(c, dtype=np.int64) for c in zip(*ops, strict=True))
    got = depth_per_stream(stream, launch, end)
    expected = _reference(ops)
    assert [g[0] for g in got] == [e[0] for e in expected]
    for g, e in zip(got, expected, strict=True):
        assert g[1] == e[1] and g[3] == e[3] and g[2] == pytest.approx(e[2], rel=1e-12)
    assert max(g[1] for g in got) > 1  # queues formed


def test_no_launches() -> None:
    empty = np.array([], dtype=np.int64)
    assert depth_per_stream(empty, empty, empty) == []


def test_the_table_for_query(example_trace: Path) -> None:
    with open_trace(example_trace) as t:
        analyze.load(t)
        rows = t.query("select * from xpu_stream_queue order by launches desc")
        launches = t.query(
            "select device_track_id, stream, count(*) as n from xpu_launch "
            "group by 1, 2 order by n desc"
        )
    assert sorted((r["device_track_id"], r["stream"], r["launches"]) for r in rows) == sorted(
        (r["device_track_id"], r["stream"], r["n"]) for r in launches
    )
    assert len(rows) > 1
    assert all(r["device"].startswith("GPU") and r["max_depth"] >= 1 for r in rows)
    assert all(isinstance(r["mean_depth_at_launch"], float) for r in rows)
