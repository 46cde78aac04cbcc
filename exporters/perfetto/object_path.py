"""The object path: slices given as collector.model objects (CpuSlice, GpuOp), encoded
one at a time, plus instants and perf samples.

Producer (producer.py) sorts a reorder window of slices by start and hands it to
write_slices(), the hot loop: each slice is placed on a lane of its track (lanes.py), its
BEGIN is written at once and its END waits in a heap until it is due, so that every
track's packets go out in time order on the track's incremental clock (sequences.py).
A BEGIN is mostly one cached piece: the constant part of every BEGIN with the same track,
name, category and args is kept as bytes, and only flows, the correlation id and ids go
on after it (constants first, varying values last: deflate then finds one long match per
packet).
"""

from __future__ import annotations

from collections.abc import Sequence
from heapq import heappop, heappush
from operator import itemgetter

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import wire
from exporters.perfetto.interning import CACHED_TYPES
from exporters.perfetto.launch_stacks import write_launch_stacks
from exporters.perfetto.producer_state import LaneEntry, ProducerState
from exporters.perfetto.sequences import (
    TrackClock,
)

_TYPE_INSTANT = pb.TrackEvent.TYPE_INSTANT
_FRAME = wire.FRAME_PREFIX
_TRACK_EVENT = wire.TRACK_EVENT_PREFIX
_TS_SMALL = wire.TIMESTAMP_SMALL
_SMALL_LIMIT = len(_TS_SMALL)
_TS_TAG = wire.key(wire.PACKET_TIMESTAMP, wire.VARINT)
_FRAME_TAG = wire.key(wire.TRACE_PACKET, wire.LEN)
_TRACK_EVENT_TAG = wire.key(wire.PACKET_TRACK_EVENT, wire.LEN)
_varint = wire.varint
_int_annotation = wire.int_annotation
_GpuOp = model.GpuOp
_CpuSlice = model.CpuSlice
_NEVER = 1 << 127  # later than any timestamp
# Arg value types never part of a cached BEGIN: 1, 1.0 and True are equal as dict keys
# but encode differently.
_FLOAT_OR_BOOL = frozenset((float, bool))
_SMALL = wire.SMALL
_ANNOTATION = wire.ANNOTATION_PREFIX
_ANNOTATION_INT_TAG = wire.ANNOTATION_INT_TAG
_VALUE = itemgetter(1)
_VARINT3_LIMIT = 1 << 21
_varint3 = wire.varint3
_FLOW = wire.FLOW
_FLOW_TAG = wire.FLOW_TAG
_TERMINATING_FLOW_TAG = wire.TERMINATING_FLOW_TAG
# Cached BEGINs per sequence, at most.
_BEGIN_CACHE_SIZE = 1 << 16


def write_slices(prod: ProducerState, pending: list[model.CpuSlice | model.GpuOp]) -> None:
    """The hot loop: one BEGIN per slice, ENDs in time order among them.

    Everything it writes is cached bytes (see interning.InternedFields) around a few
    varints, laid out constant parts first and varying values last, so that deflate finds
    one long match per packet.  Method calls, attribute lookups and temporary objects are what
    cost here; the common cases are inlined and the rest goes to functions.
    """
    seq = prod.seq
    chunks = prod.trace.chunks
    flows = prod.flows
    begun, ended_first, free_flow_ids = flows.begun, flows.ended_first, flows.free
    freed, freed_at = flows.freed, flows.freed_at
    recycled = range(flows.recycle_from, flows.unrecycled_from)
    stream_lanes = prod.stream_lanes
    thread_lanes = prod.thread_lanes
    begin_heads = prod.begin_heads
    end_packets = prod.end_packets
    name_fields = seq.name_fields
    category_fields = seq.category_fields
    begin_cache = prod.begin_cache
    varying_keys = seq.varying_keys
    annotation_names = seq.annotation_name_fields
    correlation_head = seq.annotation_name("correlation_id") + _ANNOTATION_INT_TAG
    correlation_len = len(correlation_head)
    head_needs = seq.head_needs
    open_ends = prod.open_ends
    next_end = open_ends[0][0] if open_ends else _NEVER
    order = prod.order
    size = chunks.size
    chunk_bytes = chunks.chunk_bytes
    # Flow ids are handed out in the order slices are encoded, which must be the order
    # trace_processor reads them in (time order): a slice behind the latest BEGIN of
    # earlier windows (maybe not behind its own track's clock) gets fresh ids.  The
    # window is sorted, so that is the only way a slice can be behind.
    latest = prod.latest
    track_clocks = seq.track_clocks
    # Each slice with the start of the next one (the last one's END always waits: the
    # next window may start earlier).
    next_starts = [e.ts for e in pending]
    next_starts[0] = -1
    next_starts.append(next_starts.pop(0))
    for ev, next_start in zip(pending, next_starts, strict=True):
        ts = ev.ts
        if ts >= next_end:
            # ENDs due at or before this BEGIN.
            while open_ends and open_ends[0][0] <= ts:
                end_ts, _, end_packet, cell = heappop(open_ends)
                delta = end_ts - cell[0]
                if delta >= 0:
                    cell[0] = end_ts
                    stamp = _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)
                else:
                    end_packet, stamp = _late_end(prod, end_packet, cell, end_ts)
                n = len(end_packet) + len(stamp)
                cell[3]((_FRAME[n], end_packet, stamp))
                size += n + 2
            next_end = open_ends[0][0] if open_ends else _NEVER
        if freed and ts > freed_at:
            # Flow ids freed at an earlier time: free for this slice.  Not for one
            # that starts when a flow ended: trace_processor reads the packets of
            # one time in file order, and the end may be in a later track's list.
            for freed_id in freed:
                heappush(free_flow_ids, freed_id)
            freed.clear()
        dur = ev.dur
        end = ts + dur if dur > 0 else ts
        gpu = type(ev) is _GpuOp
        corr: int | None
        if gpu:
            lanes = stream_lanes.get((ev.device, ev.stream)) or _lanes(prod, ev)  # type: ignore[union-attr]
            corr = ev.correlation_id  # type: ignore[union-attr]
        else:
            lanes = thread_lanes.get((ev.pid, ev.tid)) or _lanes(prod, ev)  # type: ignore[union-attr]
            corr = None
        # Lane 0 with nothing open, or only a slice that has ended: LaneSet.place's
        # answer without the call.
        stack = lanes[1][0]
        if ts >= lanes[0][0] and (not stack or (len(stack) == 1 and stack[0] <= ts)):
            if stack:
                stack[0] = end
            else:
                stack.append(end)
            lanes[0][0] = ts
            index = 0
        else:
            index = lanes[2](ts, dur)
        uuids = lanes[3]
        uuid = uuids[index] if index < len(uuids) else _new_lane(prod, ev, index)
        cell = track_clocks.get(uuid) or seq.track_clock(uuid, gpu)
        delta = ts - cell[0]
        if delta >= 0:
            cell[0] = ts
            tail = cell[4]
            stamp = _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)
        else:  # late for its track: an absolute time, the track's clock left alone
            tail = head_needs
            stamp = seq.absolute_timestamp(ts)
        # Constant parts first: track (+ device and stream), name, category, args.  A
        # BEGIN seen before (same track, name, category and args) is one cached piece;
        # not for args with floats or bools (1, 1.0 and True are equal as keys but
        # encode differently).
        args = ev.args
        varying: Sequence[bytes]
        if varying_keys.isdisjoint(args):
            key = (uuid, ev.name, ev.category, *args, *args.values())
            cached = begin_cache.get(key)
            if cached is not None and _FLOAT_OR_BOOL.isdisjoint(map(type, args.values())):
                parts = [cached]
                varying = ()
            else:
                parts = [
                    begin_heads.get(uuid) or _begin_head(prod, uuid, ev),
                    name_fields.get(ev.name) or seq.name_field(ev.name),
                    category_fields.get(ev.category) or seq.category_field(ev.category),
                ]
                rare = seq.args_fields(args.items(), parts)
                if rare is not None:
                    varying = rare
                else:  # every value seen before: worth caching
                    varying = ()
                    if len(begin_cache) < _BEGIN_CACHE_SIZE:
                        begin_cache[key] = b"".join(parts)
        elif len(args) == 1:
            # Only an id, such as a CUDA API call's correlation id.
            ((arg, value),) = args.items()
            parts = [begin_cache.get((uuid, ev.name, ev.category)) or _begin_plain(prod, uuid, ev)]
            varying = (
                (_int_annotation(annotation_names[arg], value),)
                if type(value) is int and 0 <= value <= wire.INT64_MAX
                else (seq.annotation(arg, value),)
            )
        else:
            parts, varying = _begin_with_varying_args(prod, uuid, ev)
        # Then what varies: flows, correlation id, args with values seen rarely.
        fids = ev.flow_ids
        fid: int | None
        if fids:
            behind = ts < latest
            if len(fids) == 1 and not behind:
                fid = begun.get(fids[0])
                if fid is None:
                    fid = ended_first.pop(fids[0], None)
                    if fid is None:
                        if free_flow_ids:
                            fid = heappop(free_flow_ids)
                        else:
                            fid = flows.next_id
                            flows.next_id = fid + 1
                        begun[fids[0]] = fid
                parts.append(_FLOW.pack(_FLOW_TAG, fid))
            else:
                parts.append(flows.starts(fids, behind))
        fids = ev.terminating_flow_ids
        if fids:
            behind = ts < latest
            if len(fids) == 1 and not behind:
                fid = begun.pop(fids[0], None)
                if fid is None:
                    fid = ended_first[fids[0]] = flows.next_unrecycled
                    flows.next_unrecycled = fid + 1
                elif fid in recycled:
                    if next_start > ts:  # every later slice starts after this one
                        heappush(free_flow_ids, fid)
                    else:
                        freed.append(fid)
                        freed_at = ts
                parts.append(_FLOW.pack(_TERMINATING_FLOW_TAG, fid))
            else:
                parts.append(flows.ends(fids, behind, ts))
                freed_at = flows.freed_at
        if corr is not None:
            if 0 <= corr < _VARINT3_LIMIT:
                corr_value = _SMALL[corr] if corr < _SMALL_LIMIT else _varint3(corr)
                parts += (
                    _ANNOTATION[correlation_len + len(corr_value)],
                    correlation_head,
                    corr_value,
                )
            else:
                parts.append(seq.annotation("correlation_id", corr))
        if varying:
            parts += varying
        event = b"".join(parts)
        n = len(event)
        event_head = _TRACK_EVENT[n] if n < _SMALL_LIMIT else _TRACK_EVENT_TAG + _varint(n)
        if seq.dirty:
            # Into the sequence's interned-data packet of this chunk, ahead of the
            # chunk's track lists (the first user of an entry may be in any of them).
            size += seq.intern_into_chunk()
        n += len(event_head) + len(tail) + len(stamp)
        cell[3](
            (
                _FRAME[n] if n < _SMALL_LIMIT else _FRAME_TAG + _varint(n),
                event_head,
                event,
                tail,
                stamp,
            )
        )
        size += n + 3
        order += 1
        end_packet = end_packets.get(uuid) or prod.end_packet(uuid)
        if end <= next_start and end <= next_end and end >= cell[0]:
            # Due before anything else: write the END now, no heap.
            delta = end - cell[0]
            cell[0] = end
            stamp = _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)
            n = len(end_packet) + len(stamp)
            cell[3]((_FRAME[n], end_packet, stamp))
            size += n + 2
        else:
            heappush(open_ends, (end, -order, end_packet, cell))
            if end < next_end:
                next_end = end
        if size >= chunk_bytes:
            chunks.size = size
            chunks.flush()
            size = 0
        if corr is None and type(ev) is _CpuSlice and ev.launch_stack is not None:
            chunks.size = size
            write_launch_stacks(
                prod.trace, prod.launch_threads, ev.pid, ev.tid, (ts,), (ev.launch_stack,)
            )
            size = chunks.size
    prod.latest = max(latest, pending[-1].ts)
    flows.freed_at = freed_at
    chunks.size = size
    prod.order = order


def _begin_plain(prod: ProducerState, uuid: int, ev: model.CpuSlice | model.GpuOp) -> bytes:
    """The cached BEGIN head without args: track, name, category."""
    seq = prod.seq
    head = (
        (prod.begin_heads.get(uuid) or _begin_head(prod, uuid, ev))
        + seq.name_field(ev.name)
        + seq.category_field(ev.category)
    )
    if len(prod.begin_cache) < _BEGIN_CACHE_SIZE:
        prod.begin_cache[(uuid, ev.name, ev.category)] = head
    return head


def _begin_with_varying_args(
    prod: ProducerState, uuid: int, ev: model.CpuSlice | model.GpuOp
) -> tuple[list[bytes], list[bytes]]:
    """A BEGIN whose args include ids (varying keys): the rest is cached as usual, the
    ids are encoded each time and go last."""
    seq = prod.seq
    varying_keys = seq.varying_keys
    items = ev.args.items()
    stable = [item for item in items if item[0] not in varying_keys]
    key = (uuid, ev.name, ev.category, *stable)
    cached = prod.begin_cache.get(key)
    varying: list[bytes]
    if cached is not None and CACHED_TYPES.issuperset(map(type, map(_VALUE, stable))):
        parts = [cached]
        varying = []
    else:
        parts = [
            prod.begin_heads.get(uuid) or _begin_head(prod, uuid, ev),
            seq.name_field(ev.name),
            seq.category_field(ev.category),
        ]
        rare = seq.args_fields(stable, parts)
        if rare is not None:
            varying = rare
        else:
            varying = []
            if len(prod.begin_cache) < _BEGIN_CACHE_SIZE:
                prod.begin_cache[key] = b"".join(parts)
    # seq.varying_annotation(k, v) for each varying arg, ints (ids) in line.
    names = seq.annotation_name_fields
    for k, v in items:
        if k in varying_keys:
            if type(v) is int and 0 <= v < _SMALL_LIMIT and k in names:
                name = names[k]
                value = _SMALL[v]
                varying += (
                    _ANNOTATION[len(name) + 1 + len(value)],
                    name,
                    _ANNOTATION_INT_TAG,
                    value,
                )
            else:
                varying.append(seq.varying_annotation(k, v))
    return parts, varying


def _lanes(prod: ProducerState, ev: model.CpuSlice | model.GpuOp) -> LaneEntry:
    """The lanes of the track `ev` goes to and their uuids, cached per producer."""
    tracks = prod.trace.tracks
    if isinstance(ev, _GpuOp):  # once per track: isinstance, which mypy narrows both ways
        lane_set, uuids = tracks.stream_lanes(ev.device, ev.stream)
        key = (ev.device, ev.stream)
        lanes = prod.stream_lanes
    else:
        lane_set, uuids = tracks.thread_lanes(ev.pid, ev.tid)
        key = (ev.pid, ev.tid)
        lanes = prod.thread_lanes
    entry = lanes[key] = (lane_set.last_starts, lane_set.open_ends, lane_set.place, uuids)
    return entry


def _new_lane(prod: ProducerState, ev: model.CpuSlice | model.GpuOp, index: int) -> int:
    tracks = prod.trace.tracks
    if isinstance(ev, _GpuOp):
        return tracks.add_stream_lanes(ev.device, ev.stream, index)
    return tracks.add_thread_lanes(ev.pid, ev.tid, index)


def end_until(prod: ProducerState, limit: int | None) -> None:
    """Write the ENDs due by `limit` (all of them for None)."""
    open_ends = prod.open_ends
    while open_ends and (limit is None or open_ends[0][0] <= limit):
        end_ts, _, end_packet, cell = heappop(open_ends)
        delta = end_ts - cell[0]
        if delta >= 0:
            cell[0] = end_ts
            stamp = _varint_field_ts(delta)
        else:
            end_packet, stamp = _late_end(prod, end_packet, cell, end_ts)
        n = len(end_packet) + len(stamp)
        cell[3]((_frame_head(n), end_packet, stamp))
        prod.trace.chunks.size += n + 3


def _late_end(
    prod: ProducerState, end_packet: bytes, cell: TrackClock, end_ts: int
) -> tuple[bytes, bytes]:
    """An END earlier than its track's clock: the packet without the clock id, and an
    absolute timestamp (which names the trace clock instead)."""
    if cell[1]:
        end_packet = end_packet[: -len(cell[1])]
    return end_packet, prod.seq.absolute_timestamp(end_ts)


def _begin_head(prod: ProducerState, uuid: int, ev: model.CpuSlice | model.GpuOp) -> bytes:
    if type(ev) is _GpuOp:
        return prod.begin_head_of(uuid, ev.device, ev.stream)
    return prod.begin_head_of(uuid, None, 0)


def write_instant(prod: ProducerState, ev: model.Instant) -> None:
    # Instants are written as they come, while slices wait in the reorder window:
    # an absolute timestamp keeps them from moving the incremental clock, and the
    # thread's own track (an instant nests anywhere) keeps them out of lane placement,
    # where one would push the window's earlier slices onto extra lanes.
    seq = prod.seq
    uuid = prod.trace.tracks.thread(ev.pid, ev.tid, None)
    prod.trace.chunks.emit_bytes(
        seq.track_event(
            seq.absolute_timestamp(ev.ts),
            _TYPE_INSTANT,
            uuid,
            ev.name,
            ev.category,
            ev.args.items(),
        )
    )


def write_sample(
    prod: ProducerState,
    pid: int,
    tid: int,
    ts: int,
    stack: model.Stack,
    timebase: str,
    cpu: int | None,
) -> None:
    seq = prod.sample_sequence(timebase)
    prod.trace.tracks.thread(pid, tid, None)
    sample = [
        wire.varint_field(wire.SAMPLE_PID, pid),
        wire.varint_field(wire.SAMPLE_TID, tid),
        wire.varint_field(wire.SAMPLE_CALLSTACK_IID, seq.callstack_iid(stack)),
    ]
    if cpu is not None:
        sample.insert(0, wire.varint_field(wire.SAMPLE_CPU, cpu))
    body = b"".join(
        (
            seq.timestamp(ts),
            seq.head_needs,
            wire.len_field(wire.PACKET_PERF_SAMPLE, b"".join(sample)),
            seq.interned_field() if seq.dirty else b"",
        )
    )
    prod.trace.chunks.emit_bytes(wire.frame(body))
    prod.trace.note_ts(ts)
    prod.trace.counts["cpu_samples"] += 1


def _varint_field_ts(delta: int) -> bytes:
    """The `timestamp` field of a delta."""
    return _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)


def _frame_head(n: int) -> bytes:
    return _FRAME[n] if n < _SMALL_LIMIT else _FRAME_TAG + _varint(n)
