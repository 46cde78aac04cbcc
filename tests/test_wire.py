"""The writer's hand-built packets against perfetto_trace_pb2 (the upb messages).

Every hot packet the writer encodes itself (slice BEGIN/END, instants, perf samples) is
decoded here with the real protobuf classes and compared with a message built field by
field with upb from the same event and the sequence's interned ids.  A decoder of the
trace's incremental timestamps checks the times without trace_processor.
"""

from __future__ import annotations

import struct
import zlib
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import compression, wire, writer
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched, in_batches

# -- wire helpers ----------------------------------------------------------------------

varints = st.one_of(st.integers(0, 300), st.integers(0, 1 << 22), st.integers(0, (1 << 64) - 1))


@given(n=varints)
def test_varint_fields_are_protobuf_encoding(n: int) -> None:
    assert (
        wire.varint_field(wire.PACKET_TIMESTAMP, n)
        == pb.TracePacket(timestamp=n).SerializeToString()
    )
    if 1 << 7 <= n < 1 << 21:
        assert wire.varint3(n) == wire.varint(n)


@given(n=st.integers(-(1 << 63), (1 << 63) - 1), iid=st.integers(1, 1 << 20))
def test_int_annotation(n: int, iid: int) -> None:
    expected = pb.TrackEvent()
    expected.debug_annotations.add(name_iid=iid, int_value=n)
    got = wire.int_annotation(wire.annotation_name(iid), n)
    assert got == expected.SerializeToString()


@given(
    value=st.one_of(st.booleans(), st.floats(allow_nan=False), st.integers(1, 1 << 40)),
    iid=st.integers(1, 1 << 20),
)
def test_other_annotations(value: bool | float | int, iid: int) -> None:
    name = wire.annotation_name(iid)
    expected = pb.TrackEvent()
    ann = expected.debug_annotations.add(name_iid=iid)
    if isinstance(value, bool):
        ann.bool_value = value
        got = wire.bool_annotation(name, value)
    elif isinstance(value, float):
        ann.double_value = value
        got = wire.double_annotation(name, value)
    else:
        ann.string_value_iid = value
        got = wire.string_iid_annotation(name, value)
    assert got == expected.SerializeToString()


@given(ids=st.lists(st.integers(0, (1 << 64) - 1), max_size=4))
def test_flow_ids(ids: list[int]) -> None:
    expected = pb.TrackEvent(flow_ids=ids, terminating_flow_ids=ids[::-1])
    got = wire.flow_ids(tuple(ids)) + wire.terminating_flow_ids(tuple(ids[::-1]))
    assert got == expected.SerializeToString()


# -- decoding a whole trace ------------------------------------------------------------


def read_packets(path: Path) -> list[pb.TracePacket]:
    """Every packet of the file, compressed chunks inflated, in file order."""
    trace = pb.Trace()
    trace.ParseFromString(path.read_bytes())
    out = []
    for packet in trace.packet:
        if packet.HasField("compressed_packets"):
            inner = pb.Trace()
            inner.ParseFromString(zlib.decompress(packet.compressed_packets))
            out.extend(inner.packet)
        else:
            out.append(packet)
    return out


class Decoded:
    """Track events and samples with absolute timestamps and interned ids resolved the
    way trace_processor does it: per sequence, its incremental clocks (64..127) from its
    snapshots, each a running sum of the deltas written with it."""

    def __init__(self, path: Path) -> None:
        self.packets = read_packets(path)
        self.begins: list[tuple[int, pb.TracePacket, dict[str, dict[int, object]]]] = []
        self.ends: list[tuple[int, int]] = []  # (ts, track uuid)
        self.instants: list[tuple[int, pb.TracePacket]] = []
        self.samples: list[tuple[int, pb.TracePacket]] = []
        self.descriptors: dict[int, pb.TrackDescriptor] = {}
        interned: dict[int, dict[str, dict[int, object]]] = defaultdict(lambda: defaultdict(dict))
        clocks: dict[tuple[int, int], int] = {}  # (sequence, clock id) -> its time
        defaults: dict[int, int] = {}
        for p in self.packets:
            seq = p.trusted_packet_sequence_id
            if p.HasField("trace_packet_defaults"):
                defaults[seq] = p.trace_packet_defaults.timestamp_clock_id
            if p.HasField("clock_snapshot"):
                for clock in p.clock_snapshot.clocks:
                    if clock.is_incremental:
                        assert clock.clock_id >= writer.INCREMENTAL_CLOCK_ID
                        clocks[seq, clock.clock_id] = clock.timestamp
            if p.HasField("track_descriptor"):
                self.descriptors[p.track_descriptor.uuid] = p.track_descriptor
            data = p.interned_data
            for field in ("event_names", "event_categories", "debug_annotation_names"):
                for entry in getattr(data, field):
                    interned[seq][field][entry.iid] = entry.name
            for entry in data.debug_annotation_string_values:
                interned[seq]["strings"][entry.iid] = entry.str.decode()
            if not p.HasField("timestamp"):
                continue
            clock_id = p.timestamp_clock_id or defaults.get(seq, 0)
            if clock_id >= writer.INCREMENTAL_CLOCK_ID:
                clocks[seq, clock_id] += p.timestamp  # KeyError: clock not defined first
                ts = clocks[seq, clock_id]
            else:
                ts = p.timestamp
            if p.HasField("perf_sample"):
                self.samples.append((ts, p))
            elif p.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                self.begins.append((ts, p, interned[seq]))
            elif p.track_event.type == pb.TrackEvent.TYPE_SLICE_END:
                self.ends.append((ts, p.track_event.track_uuid))
            elif p.track_event.type == pb.TrackEvent.TYPE_INSTANT:
                self.instants.append((ts, p))


def _expected_annotations(
    ev: model.CpuSlice | model.GpuOp, names: dict[int, object]
) -> list[pb.DebugAnnotation]:
    iids = {name: iid for iid, name in names["debug_annotation_names"].items()}
    strings = {value: iid for iid, value in names["strings"].items()}
    args: list[tuple[str, model.ArgValue]] = []
    if isinstance(ev, model.GpuOp):
        args += [("device", ev.device), ("stream", ev.stream)]
        if ev.correlation_id is not None:
            args.append(("correlation_id", ev.correlation_id))
    args += ev.args.items()
    out = []
    for key, value in args:
        ann = pb.DebugAnnotation(name_iid=iids[key])
        if isinstance(value, bool):
            ann.bool_value = value
        elif isinstance(value, int) and -(1 << 63) <= value < 1 << 63:
            ann.int_value = value
        elif isinstance(value, float):
            ann.double_value = value
        else:
            ann.string_value_iid = strings[str(value)]
        out.append(ann)
    return out


def check_begin(ts: int, packet: pb.TracePacket, names: dict, ev: model.Event) -> None:
    """The BEGIN packet is the upb-built TrackEvent of `ev` (flow ids aside: the writer
    renumbers them; annotations in any order)."""
    assert isinstance(ev, model.CpuSlice | model.GpuOp)
    assert ts == ev.ts
    assert packet.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    got = pb.TrackEvent()
    got.CopyFrom(packet.track_event)
    expected = pb.TrackEvent(type=pb.TrackEvent.TYPE_SLICE_BEGIN, track_uuid=got.track_uuid)
    expected.name_iid = {v: k for k, v in names["event_names"].items()}[ev.name]
    if ev.category:
        expected.category_iids.append(
            {v: k for k, v in names["event_categories"].items()}[ev.category]
        )
    key = lambda a: a.SerializeToString()  # noqa: E731
    assert sorted(got.debug_annotations, key=key) == sorted(
        _expected_annotations(ev, names), key=key
    )
    assert len(got.flow_ids) == len(ev.flow_ids)
    assert len(got.terminating_flow_ids) == len(ev.terminating_flow_ids)
    for field in ("debug_annotations", "flow_ids", "terminating_flow_ids"):
        got.ClearField(field)
    assert got == expected
    # What the encoder wrote parses back to the same bytes upb writes for it (no unknown
    # fields, nothing lost).
    assert pb.TrackEvent.FromString(packet.track_event.SerializeToString()) == packet.track_event


def check_trace(path: Path, events: list[model.Event]) -> Decoded:
    """Every slice of `events` is one BEGIN (right content, time, track) and one END at
    its end on the same track; flows pair up as in the events."""
    decoded = Decoded(path)
    slices = sorted(
        (e for e in events if isinstance(e, model.CpuSlice | model.GpuOp)),
        key=lambda e: (e.ts, -e.dur),
    )
    begins = sorted(decoded.begins, key=lambda b: b[0])
    assert len(begins) == len(slices) == len(decoded.ends)
    by_content: dict[tuple[int, str], list[model.Event]] = defaultdict(list)
    for ev in slices:
        by_content[(ev.ts, ev.name)].append(ev)
    ends = sorted(decoded.ends)
    flow_pairs: dict[int, list[int]] = defaultdict(list)  # written id -> end kinds
    for ts, packet, names in begins:
        name = names["event_names"][packet.track_event.name_iid]
        candidates = by_content[(ts, name)]
        assert candidates, (ts, name)
        # Among equal (ts, name), any whose content matches and whose END is on the
        # BEGIN's track (the file holds packets track by track, so two events of the same
        # content and time can come in either order).
        uuid = packet.track_event.track_uuid
        for i, ev in enumerate(candidates):
            if (ev.ts + max(ev.dur, 0), uuid) not in ends:
                continue
            try:
                check_begin(ts, packet, names, ev)
            except AssertionError:
                continue
            del candidates[i]
            break
        else:
            raise AssertionError(f"no event matches the BEGIN at {ts} ({name})")
        end = ev.ts + max(ev.dur, 0)
        ends.remove((end, uuid))
        for fid in packet.track_event.flow_ids:
            flow_pairs[fid].append(0)
        for fid in packet.track_event.terminating_flow_ids:
            flow_pairs[fid].append(1)
    assert ends == []
    return decoded


# -- writer packets --------------------------------------------------------------------

arg_values = st.one_of(
    st.integers(0, 3),
    st.integers(-(1 << 70), 1 << 70),
    st.booleans(),
    st.floats(-4, 4, allow_nan=False).map(lambda f: round(f, 1)),
    st.sampled_from(["HtoD", "[[64, 512]]", ""]),
)
args_st = st.dictionaries(st.sampled_from(["grid_x", "bytes", "kind", "x"]), arg_values, max_size=4)
slice_st = st.tuples(
    st.booleans(),  # GPU op?
    st.integers(0, 2),  # stream / thread
    st.integers(0, 5_000),  # ts
    st.integers(0, 3_000),  # dur
    st.sampled_from(["k0", "k1", "memcpy"]),
    st.sampled_from(["kernel", "memcpy", "", "cpu_op"]),
    args_st,
    st.booleans(),  # with a correlation id / flow
)


def make_events(items: list) -> list[model.Event]:
    events: list[model.Event] = [model.GpuDevice(0, "GPU")]
    for n, (gpu, lane, ts, dur, name, cat, args, linked) in enumerate(items, start=1):
        fid = model.flow_id(7, n)
        events.append(
            model.CpuSlice(
                7,
                7 + lane,
                ts,
                1 + dur // 4,
                "cudaLaunchKernel",
                "cuda_api",
                {"correlation_id": n},
                flow_ids=(fid,) if linked and gpu else (),
            )
        )
        if gpu:
            events.append(
                model.GpuOp(
                    0,
                    lane,
                    ts + 100,
                    dur,
                    name,
                    cat,
                    args,
                    correlation_id=n if linked else None,
                    terminating_flow_ids=(fid,) if linked else (),
                )
            )
        else:
            events.append(model.CpuSlice(7, 7 + lane, ts + 1, dur // 8, name, cat, args))
    return events


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=st.lists(slice_st, min_size=1, max_size=40), batch=st.sampled_from([4, 64, 65536]))
def test_packets_decode_to_the_upb_messages(tmp_path: Path, items: list, batch: int) -> None:
    """Hand-built BEGIN/END packets, read back with perfetto_trace_pb2, are the events;
    in small batches many slices are late for their tracks' clocks (absolute
    timestamps, lanes and flow ids given after later slices')."""
    events = make_events(items)
    path = tmp_path / "w.perfetto-trace"
    with TraceWriter(path, compression_level=0) as w:
        w.producer("test").write_all(in_batches(events, batch))
    check_trace(path, events)


def test_flow_ids_are_recycled(tmp_path: Path) -> None:
    """One launch after the other: the flows' ids are recycled, a few ids for them all
    (batch_writer: flow k gets base + k mod the smallest period of 16 or more after which
    every flow has ended)."""
    events = make_events(
        [(True, 0, i * 10_000, 2_000, "k0", "kernel", {}, True) for i in range(500)]
    )
    path = tmp_path / "f.perfetto-trace"
    with TraceWriter(path) as w:
        w.producer("test").write_all(batched(events))
    decoded = check_trace(path, events)
    ids = [f for _, p, _ in decoded.begins for f in p.track_event.flow_ids]
    assert len(ids) == 500
    assert len(set(ids)) == 16


def test_samples_and_instants(tmp_path: Path) -> None:
    stack = model.Stack((model.Frame("main", "/bin/app", 0x10, "ab12"), model.Frame("f", "", 4)))
    events: list[model.Event] = [
        model.CpuSample(7, 8, 1_000, stack, cpu=2),
        model.CpuSample(7, 8, 900, stack, cpu=0),  # back in time: absolute timestamp
        model.Instant(7, 8, 950, "mark", "nvtx", {"n": 1, "s": "x", "f": 0.5, "b": True}),
        model.CpuSlice(7, 8, 980, 5, "cudaLaunchKernel", "cuda_api", launch_stack=stack),
    ]
    path = tmp_path / "s.perfetto-trace"
    with TraceWriter(path, sample_frequency_hz=99) as w:
        w.producer("test").write_all(batched(events))
    decoded = Decoded(path)
    samples = sorted(decoded.samples, key=lambda s: s[0])
    assert [ts for ts, _ in samples] == [900, 1_000]  # CPU samples only
    for ts, p in samples:
        expected = pb.PerfSample(pid=7, tid=8, callstack_iid=p.perf_sample.callstack_iid)
        expected.cpu = {900: 0, 1_000: 2}[ts]
        assert p.perf_sample == expected
        assert p.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    # The launch stack: a StreamingProfilePacket on a sequence of thread 7/8 whose reference
    # time (CLOCK_MONOTONIC us; the trace clock here) plus its delta is 980 ns's whole us,
    # the rest in process_priority (exporters/perfetto/launch_stacks.py).
    (launch,) = [p for p in decoded.packets if p.HasField("streaming_profile_packet")]
    (thread,) = [
        p.thread_descriptor
        for p in decoded.packets
        if p.HasField("thread_descriptor")
        and p.trusted_packet_sequence_id == launch.trusted_packet_sequence_id
    ]
    assert (thread.pid, thread.tid) == (7, 8)
    profile = launch.streaming_profile_packet
    assert len(profile.callstack_iid) == 1
    us = thread.reference_timestamp_us + sum(profile.timestamp_delta_us)
    assert us * 1000 + profile.process_priority == 980
    assert launch.sequence_flags == pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
    # ... and its frames as an arg of the API slice, innermost first.
    (api,) = [(p, i) for _, p, i in decoded.begins if p.track_event.debug_annotations]
    annotation = api[0].track_event.debug_annotations[0]
    assert api[1]["debug_annotation_names"][annotation.name_iid] == "launch_stack"
    assert api[1]["strings"][annotation.string_value_iid] == "f <- main"
    instants = [(ts, p) for ts, p in decoded.instants if p.track_event.category_iids]
    ((ts, p),) = instants
    assert ts == 950
    assert len(p.track_event.debug_annotations) == 4
    # The xpu_perf_metadata instant: names written out, on the descriptor sequence.
    (meta,) = [p for _, p in decoded.instants if p.track_event.categories]
    assert list(meta.track_event.categories) == [writer.METADATA_CATEGORY]
    assert not meta.HasField("interned_data") and not meta.sequence_flags
    assert {a.name for a in meta.track_event.debug_annotations} >= {"tool", "writer.slices"}


def test_fixed_flow_encoding_matches_struct() -> None:
    assert wire.FLOW.pack(wire.FLOW_TAG, 5) == wire.key(wire.EVENT_FLOW_IDS, wire.FIXED64) + (
        struct.pack("<Q", 5)
    )


def test_one_interned_packet_per_sequence_and_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """New names of a chunk go into one interned-data packet of the sequence (filled in
    as slices are encoded), which comes before every packet that uses them, also when a
    chunk ends in the middle of a batch and when a batch goes back in time."""
    monkeypatch.setattr(compression, "CHUNK_BYTES", 1 << 12)  # many chunks
    items = [
        (i % 2 == 0, i % 3, (i * 7_919) % 20_000, 50 + i % 300, f"k{i % 997}", "kernel", {}, True)
        for i in range(2_000)
    ]
    events = make_events(items)
    path = tmp_path / "i.perfetto-trace"
    with TraceWriter(path) as w:
        w.producer("test").write_all(in_batches(events, 64))
    check_trace(path, events)  # every BEGIN's name resolves on its sequence
    raw = pb.Trace.FromString(path.read_bytes())
    defined: dict[int, set[int]] = defaultdict(set)  # sequence -> event name iids so far
    interned_only = 0
    for chunk in raw.packet:
        seen: set[int] = set()
        for p in pb.Trace.FromString(zlib.decompress(chunk.compressed_packets)).packet:
            seq = p.trusted_packet_sequence_id
            if p.first_packet_on_sequence:
                defined[seq].clear()
            defined[seq].update(e.iid for e in p.interned_data.event_names)
            if p.HasField("interned_data") and p.WhichOneof("data") is None:
                assert seq not in seen  # one per sequence and chunk
                seen.add(seq)
                interned_only += 1
            if p.track_event.name_iid:
                assert p.track_event.name_iid in defined[seq]  # defined before it is used
    assert len(raw.packet) > 5 and interned_only > 5
