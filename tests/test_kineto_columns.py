"""`convert`'s columnar conversion (collector/sources/kineto_columns.py) against the object
path it replaced (tests/kineto_reference.py, kept as this reference): what trace_processor
reads back from both (tests/convert_compare.py's parts: slices by track, args, flows,
thread and process names) must agree on real traces and on a synthetic one of the odd
layouts the object path handles; every flow event is a flow or counted by reason; and the
lane check the writer's columnar path uses for nested slices must agree with
LaneSet.place."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exporters.perfetto.batch_writer import _properly_nested
from exporters.perfetto.lanes import LaneSet

from .conftest import REPO
from .convert_compare import compare

TRACES = sorted((REPO / "tests" / "data" / "kineto_outside").glob("*.json.gz"))
# Traces torch.profiler wrote of the bench workloads on the H100 (one with Python stacks).
OWN_TRACES = sorted((REPO / "bench" / "data").glob("*kineto*.json.gz"))
# Parts that depend on the order a path meets overlapping slices in (see tests/convert_compare.py).
LANE_PARTS = ("slices on a sibling lane of their thread", "tracks")


def _assert_same(src: Path, work: Path, lanes_too: bool = True) -> None:
    for part, (n_want, n_got, only_want, only_got) in compare(src, work).items():
        if part in LANE_PARTS and not lanes_too:
            continue
        assert (only_want, only_got) == ([], []), (part, n_want, n_got)


@pytest.mark.parametrize("src", TRACES, ids=lambda p: p.name)
def test_outside_traces_read_back_like_convert(src: Path, tmp_path: Path) -> None:
    _assert_same(src, tmp_path)


@pytest.mark.parametrize("src", OWN_TRACES, ids=lambda p: p.name)
def test_own_traces_read_back_like_convert(src: Path, tmp_path: Path) -> None:
    """Lanes apart: with Python stack events (partly overlapping their record_function
    spans) the two paths put other slices on sibling lanes (columns 250, objects 36,919 on
    kineto_launch_bound_stack); every slice is kept by both, on its thread."""
    _assert_same(src, tmp_path, lanes_too=False)


def test_every_flow_event_is_a_flow_or_counted(tmp_path: Path) -> None:
    """Flow events that make no flow are counted by category and reason, as the object
    path words them: a second start under one id, a start without an end, an end without
    a start, an end at no complete event, a pair from an event to itself."""
    from exporters.perfetto.engine.trace_processor import open_trace
    from exporters.perfetto.engine.views import load_views

    x = {"ph": "X", "cat": "cpu_op", "pid": 1, "tid": 1, "dur": 1.0}
    events: list[dict[str, Any]] = [
        {**x, "name": "a", "ts": 10.0},
        {**x, "name": "b", "ts": 20.0},
        {"ph": "s", "cat": "fwdbwd", "id": 1, "pid": 1, "tid": 1, "ts": 10.0},
        {"ph": "s", "cat": "fwdbwd", "id": 1, "pid": 1, "tid": 1, "ts": 20.0},  # repeated
        {"ph": "f", "cat": "fwdbwd", "id": 1, "pid": 1, "tid": 1, "ts": 20.0, "bp": "e"},
        {"ph": "s", "cat": "fwdbwd", "id": 2, "pid": 1, "tid": 1, "ts": 10.0},  # no end
        {"ph": "f", "cat": "fwdbwd", "id": 3, "pid": 1, "tid": 1, "ts": 20.0},  # no start
        {"ph": "s", "cat": "ac2g", "id": 4, "pid": 1, "tid": 1, "ts": 10.0},
        {"ph": "f", "cat": "ac2g", "id": 4, "pid": 1, "tid": 1, "ts": 99.0},  # no event
        {"ph": "s", "cat": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 20.0},
        {"ph": "f", "cat": "ac2g", "id": 5, "pid": 1, "tid": 1, "ts": 20.0},  # to itself
    ]
    src = tmp_path / "flows.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "flows.perfetto-trace"
    from collector import cli

    assert cli.main(["convert", str(src), "-o", str(out), "-q", "--no-progress"]) == 0
    with open_trace(out) as t:
        load_views(t)
        meta = {
            r["key"]: r["int_value"]
            for r in t.query("select key, int_value from xpu_metadata where key like 'convert_%'")
        }
        flows = t.scalar("select count(*) from flow")
    skipped = {k: v for k, v in meta.items() if k.startswith("convert_skipped_")}
    assert skipped == {
        "convert_skipped_fwdbwd_flow_starts_repeated_under_one_id": 1,
        "convert_skipped_fwdbwd_flow_starts_without_an_end": 1,
        "convert_skipped_fwdbwd_flow_ends_without_a_start": 1,
        "convert_skipped_ac2g_flow_pairs_with_an_end_at_no_event": 1,
        "convert_skipped_ac2g_flow_pairs_from_an_event_to_itself": 1,
    }
    assert meta["convert_flows_fwdbwd"] == 1 and flows == 1


def _odd_trace() -> dict[str, Any]:
    """Complete events of every layout the columns take or leave to the object path."""
    cpu = {"ph": "X", "cat": "cpu_op", "pid": 10, "tid": 11}
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 10, "args": {"name": "python"}},
        {"ph": "M", "name": "thread_name", "pid": 10, "tid": 11, "args": {"name": "main"}},
        # Args of one shape whose values change type: 1, 1.0, true, null, text, lists.
        *(
            {**cpu, "name": "op", "ts": 100.0 + i, "dur": 0.5, "args": {"v": v, "External id": i}}
            for i, v in enumerate([1, 1.0, True, None, "1", [1, 2], {"a": [1]}, 2**62, -5, 0.0])
        ),
        # Int times (epoch-based), a missing dur, a text pid and tid, a bool ts.
        {**cpu, "name": "int_ts", "ts": 1_700_000_000_000_000, "dur": 3, "args": {}},
        {"ph": "X", "cat": "cpu_op", "name": "no_dur", "pid": 10, "tid": 11, "ts": 200.0},
        {"ph": "X", "cat": "Trace", "name": "span", "pid": "Spans", "tid": "T", "ts": 1.0,
         "dur": 500.0, "args": {"Op count": 0}},
        {**cpu, "name": "bool_ts", "ts": True, "dur": 1.0},
        {**cpu, "name": "no_args", "ts": 300.0, "dur": 1.0},
        {**cpu, "name": "list_args", "ts": 301.0, "dur": 1.0, "args": [1, 2]},
        {**cpu, "name": "few", "ts": 310.0, "dur": 1.0, "args": {"Fwd thread id": 0}},
        # Nested and partly overlapping slices on one thread.
        {**cpu, "name": "outer", "ts": 400.0, "dur": 10.0, "args": {}},
        {**cpu, "name": "inner", "ts": 401.0, "dur": 2.0, "args": {}},
        {**cpu, "name": "overlap", "ts": 409.0, "dur": 5.0, "args": {}},
        # An API call, its kernel (grid/block, renamed args) and an ac2g pair; a fwdbwd pair.
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 11,
         "ts": 500.0, "dur": 5.0, "args": {"correlation": 7, "cbid": 211, "External id": 3}},
        {"ph": "s", "cat": "ac2g", "id": 7, "pid": 10, "tid": 11, "ts": 500.0},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 510.0, "dur": 2.0,
         "args": {"device": 0, "stream": 7, "correlation": 7, "grid": [4, 1, 1],
                  "block": [128, 1, 1], "registers per thread": 32, "blocks per SM": 0.5,
                  "External id": 3}},
        {"ph": "f", "cat": "ac2g", "id": 7, "pid": 0, "tid": 7, "ts": 510.0, "bp": "e"},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy", "pid": 0, "tid": 7, "ts": 520.0,
         "dur": 1.0, "args": {"device": 0, "stream": -1, "correlation": 9, "bytes": 64}},
        {**cpu, "name": "fwd", "ts": 600.0, "dur": 1.0, "args": {"Sequence number": 5}},
        {"ph": "s", "cat": "fwdbwd", "id": 5, "pid": 10, "tid": 11, "ts": 600.0},
        {"ph": "X", "cat": "cpu_op", "name": "bwd", "pid": 10, "tid": 12, "ts": 700.0,
         "dur": 1.0, "args": {"Sequence number": 5}},
        {"ph": "f", "cat": "fwdbwd", "id": 5, "pid": 10, "tid": 12, "ts": 700.0, "bp": "e"},
        {"ph": "i", "name": "mark", "pid": 10, "tid": 11, "ts": 800.0, "s": "t"},
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": "GPU 0"}},
    ]  # fmt: skip
    return {"traceEvents": events}


@pytest.mark.parametrize("chunk", [3, 1 << 16])
def test_odd_layouts_read_back_like_convert(
    tmp_path: Path, chunk: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also in chunks of 3 events (and the reader's runs of ~200 bytes, so that a chunk
    fills between runs): flushes between an API call and its kernel, a flow pair's ends,
    a thread's nested slices, object slices between batches."""
    from collector.sources import kineto_columns, kineto_json

    monkeypatch.setattr(kineto_columns, "CHUNK", chunk)
    monkeypatch.setattr(kineto_columns.convert_columns, "__defaults__", (None, chunk))
    if chunk < 100:
        monkeypatch.setattr(kineto_json, "_RUN", 200)
    src = tmp_path / "odd.json"
    src.write_text(json.dumps(_odd_trace()))
    _assert_same(src, tmp_path, lanes_too=chunk > 3)


def test_arg_sets_of_rows_written_are_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Args that take a new value at every event (a copy's bandwidth) make a new arg set
    each: past ARG_SETS_KEPT only the held rows' sets are kept, and the trace reads back
    the same as the object path's."""
    from collector.sources import kineto_columns, kineto_json

    chunk = 8
    monkeypatch.setattr(kineto_columns, "CHUNK", chunk)
    monkeypatch.setattr(kineto_columns.convert_columns, "__defaults__", (None, chunk))
    monkeypatch.setattr(kineto_columns, "ARG_SETS_KEPT", 12)
    monkeypatch.setattr(kineto_json, "_RUN", 300)
    sizes: list[tuple[int, int]] = []
    prune = kineto_columns._Columns.prune_arg_sets

    def counted(self: Any) -> None:
        before = len(self.arg_sets.values)
        prune(self)
        sizes.append((before, len(self.arg_sets.values)))

    monkeypatch.setattr(kineto_columns._Columns, "prune_arg_sets", counted)
    events = [
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7,
         "ts": 100.0 + 10 * i, "dur": 2.0,
         "args": {"device": 0, "stream": 7, "correlation": i, "bytes": 4096,
                  "memory bandwidth (GB/s)": 1.5 + i / 7}}
        for i in range(200)
    ]  # fmt: skip
    src = tmp_path / "unique_args.json"
    src.write_text(json.dumps({"traceEvents": events}))
    _assert_same(src, tmp_path)
    assert sizes, "never pruned"
    assert max(after for _, after in sizes) <= 2 * chunk
    assert max(before for before, _ in sizes) <= 12 + 2 * chunk


def test_nested_check_agrees_with_place() -> None:
    """batch_writer._properly_nested: all on lane 0 exactly when LaneSet.place() would
    put them there, and the lane's state afterwards the same."""
    for seed in range(2000):
        r = random.Random(seed)
        rows = sorted(
            (
                (r.randint(0, 20), r.choice([0, 0, 1, 2, 3, 5, 8, 13]))
                for _ in range(r.randint(1, 12))
            ),
            key=lambda x: (x[0], -x[1]),
        )
        ts = np.array([a for a, _ in rows])
        dur = np.array([b for _, b in rows])
        end = np.where(dur > 0, ts + dur, ts)
        lanes = LaneSet()
        placed = [lanes.place(int(a), int(b)) for a, b in rows]
        nested = _properly_nested(ts, end, dur)
        assert nested == all(lane == 0 for lane in placed), rows
        if nested:
            around = end > ts[-1]
            around[-1] = True
            assert lanes.last_starts[0] == ts[-1]
            assert lanes.open_ends[0] == end[around].tolist()


def test_slices_after_a_batch_in_one_stream_are_written(tmp_path: Path) -> None:
    """Producer.write_all: batches before and after another in one stream are all written
    (the columnar conversion yields the batch of its events of another layout between
    its batches)."""
    from collector import model
    from exporters.perfetto.engine.trace_processor import open_trace
    from exporters.perfetto.writer import TraceWriter
    from tests.slice_batches import as_batch

    def columns(gpu: bool) -> model.SliceColumns:
        rows = 0 if gpu else 1
        return model.SliceColumns(
            ts=[100] * rows, dur=[10] * rows, track=[2] * rows, device=[0] * rows if gpu else None,
            name=[0] * rows, names=["op"], category=[0] * rows, categories=["cpu_op"],
            args=[0] * rows, arg_sets=[{}], correlation_id=[model.NONE] * rows,
        )  # fmt: skip

    batch = model.SliceBatch(1, columns(False), columns(True), [], [])
    later = [model.CpuSlice(1, 2, 200 + i, 5, f"after {i}", "cpu_op") for i in range(3)]
    out = tmp_path / "t.perfetto-trace"
    with TraceWriter(out) as w:
        before = as_batch([model.CpuSlice(1, 2, 50, 5, "before")])
        w.producer("test").write_all([before, batch, as_batch(later)])
    with open_trace(out) as t:
        names = [r["name"] for r in t.query("select name from slice order by ts")]
    assert [n for n in names if n != "op" and not n.startswith("xpu")][-3:] == [
        "after 0",
        "after 1",
        "after 2",
    ]
    assert "before" in names and "op" in names
