"""busy.py's islands (numpy) against the definition in SQL: per device (and per device and
kind of work), ops sorted by start; an island opens at an op that starts after the furthest
end of the earlier ops and ends at that furthest end just before the next opening.  The
analyses built them this way with window functions until the numpy merge replaced them;
here it stays the reference, over the random ops of test_kernel_overlap (lanes, touching
ops, ops of 0 ns, three devices) and the analysis scenarios."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from exporters.analysis.analyze import load_for_query
from exporters.analysis.busy import running_reach, time_order
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from . import analysis_traces
from .test_kernel_overlap import _ops

KIND = """CASE WHEN category != 'kernel' THEN category
     WHEN name LIKE 'nccl%' OR name LIKE 'void nccl%' THEN 'nccl' ELSE 'compute' END"""

REFERENCE = f"""
WITH op AS (
  SELECT id, device_track_id, 'any' AS kind, ts, end_ts FROM xpu_analysis_op
  UNION ALL
  SELECT id, device_track_id, {KIND}, ts, end_ts FROM xpu_analysis_op
),
reach AS (
  SELECT id, device_track_id, kind, ts, end_ts, max(end_ts) OVER (
           PARTITION BY device_track_id, kind ORDER BY ts, end_ts
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM op
),
opening AS (
  SELECT device_track_id, kind, ts,
         lead(prev_end) OVER (PARTITION BY device_track_id, kind ORDER BY ts) AS end_ts
  FROM reach WHERE prev_end IS NULL OR ts > prev_end
),
island AS (
  SELECT o.device_track_id, o.kind, o.ts,
         coalesce(o.end_ts, (SELECT max(e.end_ts) FROM op e
                             WHERE e.device_track_id IS o.device_track_id
                               AND e.kind = o.kind)) AS end_ts
  FROM opening o
)
SELECT i.device_track_id, i.kind, max(i.ts, r.ts) AS ts, min(i.end_ts, r.end_ts) AS end_ts
FROM island i JOIN xpu_analysis_region r ON i.ts < r.end_ts AND i.end_ts > r.ts
"""
OPENINGS = """
SELECT id, device_track_id, ts, prev_end FROM (
  SELECT id, device_track_id, ts, max(end_ts) OVER (
           PARTITION BY device_track_id ORDER BY ts, end_ts
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM xpu_analysis_op)
WHERE ts > prev_end
"""
ORDER = " ORDER BY 1, 2, 3, 4"


def _traces(tmp_path: Path) -> list[Path]:
    paths = []
    for seed in (1, 2, 3):
        path = tmp_path / f"ops{seed}.perfetto-trace"
        with TraceWriter(path) as writer:
            writer.producer("cupti").write_all(batched(_ops(seed)))
        paths.append(path)
    for scenario in ("launch_bound", "gpu_bound", "sync"):
        path = tmp_path / f"{scenario}.perfetto-trace"
        analysis_traces.write(path, scenario)
        paths.append(path)
    return paths


def test_islands_and_openings_are_the_definitions(tmp_path: Path) -> None:
    checked = 0
    for path in _traces(tmp_path):
        with open_trace(path) as t:
            load_for_query(t)
            got = t.query(
                "SELECT device_track_id, kind, ts, end_ts FROM xpu_analysis_busy_island" + ORDER
            )
            assert got == t.query(f"SELECT * FROM ({REFERENCE})" + ORDER), path.name
            assert t.query("SELECT * FROM _xpu_op_opening" + ORDER) == t.query(
                f"SELECT * FROM ({OPENINGS})" + ORDER
            ), path.name
            checked += len(got)
            kinds = {r["kind"] for r in got}
            if path.name.startswith("ops"):
                # overlapping ops of every kind on lanes: islands of each kind
                assert kinds == {"any", "compute", "nccl", "memcpy", "memset"}, path.name
                assert len({r["device_track_id"] for r in got}) == 3
    assert checked > 500


@pytest.mark.parametrize("seed", [1, 2])
def test_islands_merge_overlaps(tmp_path: Path, seed: int) -> None:
    """Islands of one device and kind never overlap or touch (touching ops merge), and
    their union is that of the ops (the 'any' islands cover every op)."""
    path = tmp_path / "ops.perfetto-trace"
    with TraceWriter(path) as writer:
        writer.producer("cupti").write_all(batched(_ops(seed)))
    with open_trace(path) as t:
        load_for_query(t)
        islands = t.query(
            "SELECT device_track_id, kind, ts, end_ts FROM xpu_analysis_busy_island" + ORDER
        )
        ops = t.query("SELECT device_track_id, ts, end_ts FROM xpu_analysis_op")
    by_key: dict[tuple[int, str], list[tuple[int, int]]] = {}
    for r in islands:
        by_key.setdefault((r["device_track_id"], r["kind"]), []).append((r["ts"], r["end_ts"]))
    for spans in by_key.values():
        assert all(a_end < b_ts for (_, a_end), (b_ts, _) in itertools.pairwise(spans))
        assert all(ts < end for ts, end in spans)
    for op in ops:
        assert any(
            ts <= op["ts"] and op["end_ts"] <= end
            for ts, end in by_key[(op["device_track_id"], "any")]
        )


@pytest.mark.parametrize("groups", [1, 7, 40_000])
def test_running_reach_sorts_as_lexsort(groups: int) -> None:
    """The ops in (group, ts, end_ts) order, ties in input order, whether the group codes
    fit the 16-bit radix sort or not, with or without the time order given."""
    rng = np.random.default_rng(groups)
    n = 20_000
    group = rng.integers(0, groups, n) * 3 - 1
    ts = rng.integers(0, 500, n)
    end_ts = ts + rng.integers(0, 50, n)
    want = np.lexsort((end_ts, ts, group))
    for by_time in (None, time_order(ts, end_ts)):
        reach = running_reach(group, ts, end_ts, by_time)
        assert reach.order.tolist() == want.tolist()
        expect = np.maximum.accumulate  # the running maximum restarts per group
        for g in np.unique(group)[:50].tolist():
            mine = reach.group == g
            ends = end_ts[reach.order][mine]
            assert reach.reach[mine].tolist() == expect(ends).tolist()
