"""report's busy time per stream (gpu_busy.sql) on streams whose ops overlap on sibling
lanes and on streams of one lane: the gpu_streams rows and the timeline's bins add up to
the union of each stream's op intervals, recomputed here from the raw slices.

gpu_busy.sql merges only the ops of streams with several lanes (or nested ops); the ops of
a one-lane stream cannot overlap and are summed as they are.  The random ops of
tests/test_kernel_overlap.py give both: two devices of two streams whose ops overlap, and a
device whose one stream has ops that touch and last 0 ns."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from exporters.report.queries import collect
from tests.slice_batches import batched

from .test_kernel_overlap import _ops
from .test_report import ALL, section, union_length

RAW = """
select d.name as device, tr.name as stream, tr.id as lane, s.ts, s.dur
from slice s join track tr on s.track_id = tr.id join track d on d.id = tr.parent_id
where s.category in ('kernel', 'memcpy', 'memset')
"""


@pytest.mark.parametrize("seed", [1, 2])
def test_stream_busy_is_the_union_on_lanes_and_single_lanes(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "ops.perfetto-trace"
    with TraceWriter(path) as writer:
        writer.producer("cupti").write_all(batched(_ops(seed)))
    with open_trace(path) as t:
        report = collect(t, path.name, top=ALL, bins=50)
        raw = t.query(RAW)
    spans: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    lanes: dict[tuple[str, str], set[int]] = defaultdict(set)
    for op in raw:
        key = (op["device"], op["stream"])
        lanes[key].add(op["lane"])
        if op["dur"] > 0:
            spans[key].append((op["ts"], op["ts"] + op["dur"]))
    # Both paths of gpu_busy.sql: streams on sibling lanes, and a stream of one lane.
    assert any(len(ids) > 1 for ids in lanes.values())
    assert any(len(ids) == 1 and spans[key] for key, ids in lanes.items())
    rows = {
        (r["device"], r["stream"]): r
        for r in section(report, "gpu_streams").rows
        if r["stream"] != "*"
    }
    assert set(rows) == {key for key, s in spans.items() if s}
    for key, row in rows.items():
        assert row["busy_ns"] == union_length(spans[key]), key
    for tl_row in report.timeline.rows:
        if tl_row.stream != "*":
            assert sum(tl_row.busy_ns) == union_length(spans[(tl_row.device, tl_row.stream)])
