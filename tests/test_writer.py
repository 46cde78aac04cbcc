"""The encoder, read back through the real embedded trace_processor."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import model
from exporters.perfetto import compression
from exporters.perfetto import writer as writer_module
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import as_batch, as_batches, batched

PID = 42

slice_st = st.tuples(
    st.integers(0, 3),  # stream or thread selector
    st.integers(1_000, 200_000),  # ts
    st.integers(0, 50_000),  # dur
    st.booleans(),  # GPU op?
    st.sampled_from(["k0", "k1", "memcpy_a", "op"]),
)


def _write(
    path: Path, items: list[tuple[int, int, int, bool, str]], batch: int | None = None
) -> list[model.Event]:
    """The items as API calls and their kernels, written as one SliceBatch, or with
    `batch` as batches of that many items each, in the items' order (not in time order:
    a batch may go back in time before the slices of the batches before it)."""
    events: list[model.Event] = []
    with TraceWriter(path) as w:
        p = w.producer("test")
        p.write(model.GpuDevice(0, "Test GPU"))
        size = batch or max(len(items), 1)
        for first in range(0, len(items), size):
            part = _items_events(items[first : first + size], first + 1)
            events += part
            p.write_all(as_batches(part))
    return events


def _items_events(
    items: list[tuple[int, int, int, bool, str]], first_corr: int
) -> list[model.CpuSlice | model.GpuOp]:
    events: list[model.CpuSlice | model.GpuOp] = []
    for corr, (lane, ts, dur, gpu, name) in enumerate(items, start=first_corr):
        fid = model.flow_id(PID, corr)
        api = model.CpuSlice(
            PID,
            PID + lane,
            ts,
            1 + dur // 10,
            "cudaLaunchKernel",
            model.CAT_CUDA_API,
            {"correlation_id": corr},
            flow_ids=(fid,) if gpu else (),
        )
        events.append(api)
        if gpu:
            op = model.GpuOp(
                0,
                7 + lane,
                ts + 500,
                dur,
                name,
                model.CAT_KERNEL,
                {"grid_x": 4},
                correlation_id=corr,
                terminating_flow_ids=(fid,),
            )
            events.append(op)
    return events


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=st.lists(slice_st, min_size=1, max_size=60))
def test_random_streams_round_trip(
    tmp_path: Path, items: list[tuple[int, int, int, bool, str]]
) -> None:
    path = tmp_path / "t.perfetto-trace"
    events = _write(path, items)
    _check_round_trip(path, events)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=st.lists(slice_st, min_size=1, max_size=60), batch=st.sampled_from([3, 16]))
def test_late_slices_round_trip(
    tmp_path: Path, items: list[tuple[int, int, int, bool, str]], batch: int
) -> None:
    """Batches whose slices are earlier than those of the batches before them (late for
    their tracks' clocks: absolute timestamps, lanes placed after later slices, flow ids
    given after later ones) read back the same."""
    path = tmp_path / "t.perfetto-trace"
    events = _write(path, items, batch)
    _check_round_trip(path, events)


def test_more_tracks_than_sequence_clocks_round_trip(tmp_path: Path) -> None:
    """Past the 62 clocks of their own, tracks share one clock per kind (CPU, GPU):
    90 threads and 90 streams, interleaved in time, read back the same."""
    import random

    rng = random.Random(7)
    items = [
        (i % 90, 1_000 + 37 * i + rng.randrange(30), rng.randrange(1, 900), i % 3 != 0, "k0")
        for i in range(2_000)
    ]
    path = tmp_path / "t.perfetto-trace"
    events = _write(path, items)
    with open_trace(path) as t:
        assert t.scalar("select count(*) from thread_track") >= 90
    _check_round_trip(path, events)


def _check_round_trip(path: Path, events: list[model.Event]) -> None:
    with open_trace(path) as t:
        rows = t.query(
            "select name, ts, dur, category from slice where category in ('kernel', 'cuda_api')"
        )
        got = sorted((r["name"], r["ts"], r["dur"], r["category"]) for r in rows)
        want = sorted(
            (e.name, e.ts, e.dur, e.category)
            for e in events
            if isinstance(e, model.CpuSlice | model.GpuOp)
        )
        assert got == want
        n_gpu = sum(1 for e in events if isinstance(e, model.GpuOp))
        assert t.scalar("select count(*) from flow") == n_gpu
        # Each flow joins the API slice and the GPU op of the same correlation id.
        assert (
            t.scalar(
                "select count(*) from flow f "
                "join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in "
                "join args a on a.arg_set_id = so.arg_set_id "
                "join args g on g.arg_set_id = si.arg_set_id "
                "where a.key = 'debug.correlation_id' and g.key = 'debug.correlation_id' "
                "and a.int_value = g.int_value"
            )
            == n_gpu
        )
        assert (
            t.query("select * from stats where severity in ('error','data_loss') and value > 0")
            == []
        )


def test_tracks_lanes_and_samples(tmp_path: Path) -> None:
    path = tmp_path / "t.perfetto-trace"
    stack = model.Stack(
        (model.Frame("main", "/bin/app", 0x10), model.Frame("_Z3foov", "/bin/app", 0x20))
    )
    with TraceWriter(path, sample_frequency_hz=99) as w:
        p = w.producer("test")
        p.write(model.ProcessInfo(PID, "python", ("python", "train.py")))
        p.write(model.ThreadInfo(PID, PID, "main"))
        p.write(model.GpuDevice(1, "NVIDIA H100"))
        a = model.GpuOp(1, 3, 100, 50, "a", model.CAT_KERNEL)
        b = model.GpuOp(1, 3, 120, 50, "b", model.CAT_KERNEL)  # overlaps a: sibling lane
        launch = model.CpuSlice(
            PID, PID, 90, 20, "cudaLaunchKernel", model.CAT_CUDA_API, launch_stack=stack
        )
        p.write(as_batch([a, b, launch]))
        p.write(model.CpuSample(PID, PID, 95, stack, cpu=3))
        w.set_metadata("cupti_dropped_records", 0)
    with open_trace(path) as t:
        tracks = t.query(
            "select t.name, p.name parent from slice s join track t on s.track_id = t.id "
            "join track p on t.parent_id = p.id where s.category = 'kernel'"
        )
        assert [r["name"] for r in tracks] == ["Stream 3", "Stream 3"]
        assert {r["parent"] for r in tracks} == {"GPU 1 (NVIDIA H100)"}
        assert t.scalar("select count(distinct track_id) from slice where category = 'kernel'") == 2
        assert t.scalar("select name from process where pid = 42") == "python"
        from exporters.perfetto.engine.views import load_views

        load_views(t)
        assert t.scalar("select count(*) from xpu_cpu_sample") == 1
        launch = t.query("select ts, utid from xpu_launch_stack")
        assert [r["ts"] for r in launch] == [90]
        frames = t.query(
            "select f.name from xpu_launch_stack l "
            "join stack_profile_callsite c on c.id = l.callsite_id "
            "join stack_profile_frame f on f.id = c.frame_id"
        )
        assert frames == [{"name": "_Z3foov"}]
        meta = {r["key"]: r["display_value"] for r in t.query("select * from xpu_metadata")}
        assert meta["cupti_dropped_records"] == "0"
        assert meta["cpu_sample_frequency_hz"] == "99"
        assert meta["tool"] == "xpu-perf"


@pytest.mark.parametrize("named_first", [True, False])
def test_thread_lanes_stay_one_thread(tmp_path: Path, named_first: bool) -> None:
    """Slices that overlap on one thread go to extra lane tracks; those are still the same
    thread to trace_processor (one utid, its name) and every slice is on a thread track.
    Kineto names its threads after their slices, so both orders are checked."""
    path = tmp_path / "t.perfetto-trace"
    tid = PID + 1
    with TraceWriter(path) as w:
        p = w.producer("test")
        p.write(model.ProcessInfo(PID, "python"))
        if named_first:
            p.write(model.ThreadInfo(PID, tid, "worker"))
        p.write(
            as_batch(
                [
                    model.CpuSlice(PID, tid, 1_000, 5_000, "outer"),
                    model.CpuSlice(PID, tid, 2_000, 6_000, "straddles outer's end"),
                    model.CpuSlice(PID, tid, 2_500, 9_000, "straddles again"),
                    model.CpuSlice(PID, tid, 20_000, 100, "later"),
                ]
            )
        )
        if not named_first:
            p.write(model.ThreadInfo(PID, tid, "worker"))
    with open_trace(path) as t:
        assert t.scalar("select count(distinct track_id) from slice") >= 3  # lanes made
        threads = t.query(f"select utid, name from thread where tid = {tid}")
        assert threads == [{"utid": threads[0]["utid"], "name": "worker"}], threads
        on_thread_tracks = t.scalar(
            "select count(*) from slice s join thread_track tt on tt.id = s.track_id "
            f"where tt.utid = {threads[0]['utid']}"
        )
        assert on_thread_tracks == 4


def test_failed_write_leaves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "t.perfetto-trace"
    with pytest.raises(RuntimeError), TraceWriter(path) as w:
        w.producer("x").write(as_batch([model.GpuOp(0, 1, 10, 5, "k", model.CAT_KERNEL)]))
        raise RuntimeError("source failed")
    assert list(tmp_path.iterdir()) == []


def test_monotonic_clock_domain(tmp_path: Path) -> None:
    """`record` writes CLOCK_MONOTONIC times: they land in trace time (BOOTTIME) through
    the writer's snapshot, incremental timestamps included."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    path = tmp_path / "m.perfetto-trace"
    snapshot = {pb.BUILTIN_CLOCK_BOOTTIME: 9_000_000, pb.BUILTIN_CLOCK_MONOTONIC: 5_000_000}
    stack = model.Stack((model.Frame("main", "/bin/app", 0x10),))
    with TraceWriter(path, clock_id=pb.BUILTIN_CLOCK_MONOTONIC, clock_snapshot=snapshot) as w:
        p = w.producer("test")
        first = model.GpuOp(0, 7, 6_000_000, 500, "k", model.CAT_KERNEL, correlation_id=1)
        second = model.GpuOp(0, 7, 6_001_000, 700, "k", model.CAT_KERNEL, correlation_id=2)
        p.write(as_batch([first, second]))
        p.write(model.CpuSample(PID, PID, 5_500_000, stack))
    with open_trace(path) as t:
        rows = t.query("select ts, dur from slice where category = 'kernel' order by ts")
        assert [(r["ts"], r["dur"]) for r in rows] == [(10_000_000, 500), (10_001_000, 700)]
        assert t.scalar("select ts from perf_sample") == 9_500_000
        assert (
            t.query("select * from stats where severity in ('error','data_loss') and value > 0")
            == []
        )


def test_deflate_thread_writes_the_same_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compression, "CHUNK_BYTES", 1 << 18)  # several chunks
    items = [
        (i % 3, 1_000 + i * 997 % 50_000, i * 31 % 4_000, i % 2 == 0, "k0") for i in range(40_000)
    ]
    _write(tmp_path / "a.perfetto-trace", items)
    original = writer_module.TraceWriter.__init__

    def threaded(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, compress_in_thread=True, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(writer_module.TraceWriter, "__init__", threaded)
        _write(tmp_path / "b.perfetto-trace", items)
    a, b = ((tmp_path / n).read_bytes() for n in ("a.perfetto-trace", "b.perfetto-trace"))
    assert a == b
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    chunks = pb.Trace.FromString(a).packet
    assert len(chunks) > 1 and all(p.HasField("compressed_packets") for p in chunks)


def test_deflate_finish_deflates_beside_the_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """At finish the chunks still queued are deflated by the caller too, beside the
    deflate thread, and every chunk is written in the order it was given."""
    import io
    import threading
    import time

    import deflate

    compress = deflate.zlib_compress
    by_thread: list[str] = []

    def slow(data: bytes, level: int) -> bytes:
        by_thread.append(threading.current_thread().name)
        time.sleep(0.05)  # the queue fills: the caller finds chunks to take at finish
        return compress(data, level)

    chunks = [bytes([i]) * 5_000 + bytes(range(256)) * i for i in range(12)]
    plain = io.BytesIO()
    unthreaded = compression.Deflater(plain, 6, threaded=False)
    for chunk in chunks:
        unthreaded.put(chunk)
    unthreaded.finish()
    monkeypatch.setattr(deflate, "zlib_compress", slow)
    out = io.BytesIO()
    threaded = compression.Deflater(out, 6, threaded=True)
    for chunk in chunks:
        threaded.put(chunk)
    threaded.finish()
    assert out.getvalue() == plain.getvalue()
    assert threaded.bytes_written == len(plain.getvalue())
    assert "MainThread" in by_thread and "xpu-perf-deflate" in by_thread


def test_instants_make_no_lanes(tmp_path: Path) -> None:
    """An instant written before the slices around it (their batch comes after it) lands
    on the thread's own track and pushes none of them onto another lane."""
    path = tmp_path / "i.perfetto-trace"
    with TraceWriter(path) as w:
        p = w.producer("test")
        p.write(model.Instant(PID, PID, 120, "mark", "nvtx"))
        p.write(
            as_batch(
                [
                    model.CpuSlice(PID, PID, 100, 50, "a", "cpu_op"),
                    model.CpuSlice(PID, PID, 110, 20, "b", "cpu_op"),
                ]
            )
        )
    with open_trace(path) as t:
        rows = t.query(
            "select name, ts, dur, depth, track_id from slice "
            "where category != 'xpu_perf_metadata' order by ts"
        )
        assert [(r["name"], r["ts"], r["dur"]) for r in rows] == [
            ("a", 100, 50),
            ("b", 110, 20),
            ("mark", 120, 0),
        ]
        assert len({r["track_id"] for r in rows}) == 1
        assert w.counts["extra_lanes"] == 0


def test_flows_at_equal_times(tmp_path: Path) -> None:
    """Flow ends at equal times on different tracks: a sync op that starts with its API
    call, and a kernel that starts (ending its flow) when the next launch starts its own.
    Every flow still joins its own pair, although each track's packets go into the file
    together and flow ids are recycled."""
    events: list[model.Event] = [model.GpuDevice(0, "Test GPU")]
    ts = 1_000
    for corr in range(1, 401):
        fid = model.flow_id(PID, corr)
        sync = corr > 200
        # The sync call outlasts its op (the call is the parent at the shared start); the
        # kernel outlasts the next launch call (it is written first at the shared start).
        api_dur, op_ts, op_dur = (5_000, ts, 1_000) if sync else (200, ts + 3_000, 2_000)
        events.append(
            model.CpuSlice(
                PID,
                PID,
                ts,
                api_dur,
                "cudaStreamSynchronize" if sync else "cudaLaunchKernel",
                model.CAT_CUDA_API,
                {"correlation_id": corr},
                flow_ids=(fid,),
            )
        )
        events.append(
            model.GpuOp(
                0,
                7,
                op_ts,
                op_dur,
                "sync" if sync else "k",
                model.CAT_KERNEL,
                correlation_id=corr,
                terminating_flow_ids=(fid,),
            )
        )
        ts += 5_000 if sync else 3_000  # a launch: the next call starts with this op
    path = tmp_path / "f.perfetto-trace"
    with TraceWriter(path) as w:
        w.producer("test").write_all(batched(events))
    _check_round_trip(path, events)


def test_repeated_float_args_keep_their_type(tmp_path: Path) -> None:
    """Float args that repeat are cached apart from ints and bools (1.0, 1 and True are
    equal as dict keys): each slice reads back with its own value type."""
    values: list[model.ArgValue] = [1.0, 1, True, 2.5, 1.0, True, 1, 2.5, 0.0, 0, False, -0.0, 0.0]
    path = tmp_path / "f.perfetto-trace"
    with TraceWriter(path) as w:
        w.producer("test").write_all(
            batched(
                model.CpuSlice(PID, PID, 100 * i, 50, "op", "cpu_op", {"v": value, "n": i})
                for i, value in enumerate(values)
            )
        )
    with open_trace(path) as t:
        rows = t.query(
            "select s.ts, a.value_type, a.int_value, a.real_value from slice s "
            "join args a on a.arg_set_id = s.arg_set_id and a.key = 'debug.v' order by s.ts"
        )
    got = [
        (r["value_type"], r["real_value"] if r["value_type"] == "real" else r["int_value"])
        for r in rows
    ]
    kinds = {float: "real", int: "int", bool: "bool"}
    assert got == [(kinds[type(v)], v) for v in values]
    signs = [math.copysign(1.0, r["real_value"]) for r in rows if r["value_type"] == "real"]
    assert signs[-2:] == [-1.0, 1.0]  # -0.0 is not 0.0


def test_slices_come_only_in_batches(tmp_path: Path) -> None:
    """The writer takes slices only as a SliceBatch: a slice object is refused, saying so."""
    with pytest.raises(RuntimeError), TraceWriter(tmp_path / "t.perfetto-trace") as w:
        p = w.producer("x")
        for event in (
            model.CpuSlice(PID, PID, 10, 5, "op", "cpu_op"),
            model.GpuOp(0, 1, 10, 5, "k", model.CAT_KERNEL),
        ):
            with pytest.raises(TypeError, match="SliceBatch"):
                p.write(event)
        raise RuntimeError("done")
