"""The one Perfetto encoder: collector.model events in, a native .perfetto-trace out.

Streaming: every packet goes to disk as soon as it is encoded; only a bounded reorder
window of slices (to place overlapping slices on lanes in start order), the slices still
open, and the interning tables stay in memory.  The file is written as `OUT.tmp` and
renamed on a clean close, so a failed run never leaves a half-written trace under the
requested name.

Encoding contract (the SQL-facing part is in docs/ARCHITECTURE.md):
- process/thread tracks from ProcessDescriptor/ThreadDescriptor-carrying TrackDescriptors;
- `GPU D (<name>)` root tracks with one `Stream N` child track per stream (plus sibling
  lanes of the same name when ops overlap);
- slices as TrackEvent BEGIN/END pairs with interned names and categories, debug
  annotations, v2 flow ids;
- stacks as interned mappings -> frames -> callstacks; CPU timer samples and launch
  stacks are PerfSamples on sequences whose timebases are named `cpu-clock` and
  `xpu_perf.launch_stack`, which is how SQL tells them apart;
- one ClockSnapshot, and an `xpu_perf_metadata` instant carrying the run's counters.

How it is encoded (why it is fast and small):
- Hot packets (slice BEGIN/END, instants, perf samples) are written as protobuf bytes by
  hand (`wire.py`): constant prefixes per track, per interned name and per annotation
  name, joined around a few varints.  Rare packets (descriptors, interned data, clock
  snapshots) are built with the upb messages of `perfetto_trace_pb2`.
- Timestamps are deltas on sequence-scoped incremental clocks (ids 64..127, one per
  track, each defined by a ClockSnapshot on the sequence): a slice costs two 1-3 byte
  deltas, its track's gap and duration, instead of two 8-byte absolute times.  Deltas
  must not be negative, so END packets are held back in a heap and encoded in time order
  among the BEGINs; a packet that would still go back in time on its track (a slice
  later than the reorder window, an instant) carries an absolute timestamp in the
  trace's clock (`timestamp_clock_id`), which leaves the incremental clock untouched.
- Each track's packets wait in a list of their own and go into a chunk together, where
  deflate finds the track's previous packet close by (see _Sequence.track_clock).
- Packets are deflated (libdeflate) in 1 MiB `compressed_packets` chunks (4 MiB at the
  levels above the default, which `convert` uses).
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from heapq import heappop, heappush
from itertools import islice
from math import copysign
from operator import attrgetter, eq
from pathlib import Path
from typing import Any, BinaryIO

import deflate
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import batch_writer, wire
from exporters.perfetto.lanes import LaneSet

TOOL_NAME = "xpu-perf"
METADATA_CATEGORY = "xpu_perf_metadata"
CPU_SAMPLE_TIMEBASE = "cpu-clock"
LAUNCH_STACK_TIMEBASE = "xpu_perf.launch_stack"
# Sequence-scoped clock ids are 64..127; each sequence defines its own clock 64.
INCREMENTAL_CLOCK_ID = 64

_SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_TYPE_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_TYPE_END = pb.TrackEvent.TYPE_SLICE_END
_TYPE_INSTANT = pb.TrackEvent.TYPE_INSTANT
# Slices are buffered and placed on lanes in start order in windows of this size; a
# slice that arrives later than the window still lands safely (see lanes.py).
REORDER_WINDOW = 65536
# A window with more slices than this before the sequence's clock gets a new sequence.
_LATE_SLICES = 256
# Uncompressed bytes per `compressed_packets` chunk.  Each track's packets of a chunk go
# in together (see _Sequence.track_clock), so longer chunks deflate better (4 MiB: 1.4%
# smaller than 1 MiB on the convert inputs), but they are slower to write (the chunk's
# pieces have left the CPU caches by the time they are joined and deflated): the longer
# ones only for levels above the default, where size comes first.
CHUNK_BYTES = 1 << 20
LARGE_CHUNK_BYTES = 1 << 22
# Deflate levels (libdeflate, 1..12).  The default is what `record` writes: level 6 costs
# ~0.6 us per GPU op.  `convert` writes a file once from a file, where size matters more:
# level 10 is 2-7% smaller than 6 and ~10% slower to convert (docs/benchmarks.md).
DEFAULT_COMPRESSION_LEVEL = 6
CONVERT_COMPRESSION_LEVEL = 10
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1

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
_BY_TS = attrgetter("ts")
_NEVER = 1 << 127  # later than any timestamp
_FLOAT_OR_BOOL = frozenset((float, bool))
_SMALL = wire.SMALL
_ANNOTATION = wire.ANNOTATION_PREFIX
_ANNOTATION_INT_TAG = wire.ANNOTATION_INT_TAG
_VARINT3_LIMIT = 1 << 21
_varint3 = wire.varint3
_FLOW = wire.FLOW
_FLOW_TAG = wire.FLOW_TAG
_TERMINATING_FLOW_TAG = wire.TERMINATING_FLOW_TAG
# A track's clock: [last timestamp written with it, its encoded `timestamp_clock_id`
# field (b"" for the sequence default), the track's packets waiting for the next chunk,
# that list's extend(), the packet fields before a BEGIN's timestamp (sequence id and
# flags, clock id)].  A list, not an object: the hot loop reads it for every packet.
_TrackClock = list[Any]
# Sequence-scoped clocks are 64..127: one of its own for each of the first 62 tracks,
# then one shared by the other CPU tracks and one by the other GPU tracks.
_OWN_CLOCKS = 62
_SHARED_CLOCK = (126, 127)  # indexed by "is a GPU track"


def _frame_packet(payload: bytes) -> bytes:
    """Frame one serialized TracePacket as `Trace.packet` (field 1, length-delimited)."""
    return wire.frame(payload)


def _event_head(kind: int, uuid: int) -> bytes:
    """TrackEvent `type` and `track_uuid`: the constant head of every event on a track."""
    return wire.varint_field(wire.EVENT_TYPE, kind) + wire.varint_field(wire.EVENT_TRACK_UUID, uuid)


class _Interner:
    """One interning table: value -> iid, new entries reported once."""

    __slots__ = ("fresh", "ids")

    def __init__(self) -> None:
        self.ids: dict[object, int] = {}
        self.fresh: list[tuple[int, object]] = []

    def get(self, value: object) -> int:
        iid = self.ids.get(value)
        if iid is None:
            iid = len(self.ids) + 1
            self.ids[value] = iid
            self.fresh.append((iid, value))
        return iid


class _Sequence:
    """One trusted_packet_sequence_id: its interning state, its incremental clock, and the
    encoded forms of its interned ids (so a hot packet is mostly cached bytes)."""

    def __init__(self, writer: TraceWriter, seq_id: int, timebase: str | None = None) -> None:
        self.writer = writer
        self.seq_id = seq_id
        self.event_names = _Interner()
        self.categories = _Interner()
        self.annotation_names = _Interner()
        self.annotation_strings = _Interner()  # string arg values repeat a lot (shapes, kinds)
        self.strings = _Interner()  # function names and mapping paths share one table
        self.mappings = _Interner()
        self.frames = _Interner()
        self.callstacks = _Interner()
        # True while an interner holds entries not yet written (see interned_field).
        self.dirty = False
        # This chunk's interned-data packet of the sequence: its entries so far and its
        # place in the writer's buffer (see intern_into_chunk).
        self._chunk_interned: pb.InternedData | None = None
        self._chunk_interned_packet = bytearray()
        # Encoded fields by value: `name_iid`, `category_iids`, annotation `name_iid`, and
        # whole annotations for argument values that repeat (see annotation()).
        self.name_fields: dict[str, bytes] = {}
        self.category_fields: dict[str, bytes] = {}
        self.annotation_name_fields: dict[str, bytes] = {}
        self.annotation_cache: dict[tuple[str, model.ArgValue], bytes] = {}
        # Float args by (key, value), apart from annotation_cache: only floats are ever
        # looked up here, so 1.0 cannot find the encoding of 1 or True (-0.0 has a key of
        # its own, see args_fields).
        self._float_annotations: dict[tuple[str, object], bytes] = {}
        self._distinct_values: dict[str, int] = {}
        # Arg keys seen with many distinct values (ids): never cached, never part of a
        # cached BEGIN head, and written last.
        self.varying_keys: set[str] = set()
        # Packet heads: the sequence id, with SEQ_NEEDS_INCREMENTAL_STATE for packets that
        # refer to interned data.
        self.head = wire.varint_field(wire.PACKET_SEQUENCE_ID, seq_id)
        self.head_needs = self.head + wire.varint_field(wire.PACKET_SEQUENCE_FLAGS, _SEQ_NEEDS)
        self.absolute_clock = wire.varint_field(wire.PACKET_TIMESTAMP_CLOCK_ID, writer.clock_id)
        # The incremental clock: the last timestamp written with it (the snapshot's 0).
        self.clock = 0
        # Track events: a clock and a packet list per track (see track_clock()); the
        # packet lists of CPU tracks go into a chunk before those of GPU tracks.
        self.track_clocks: dict[int, _TrackClock] = {}
        self.cpu_packets: list[list[bytes]] = []
        self.gpu_packets: list[list[bytes]] = []
        self._own_clocks = 0
        self._shared_clocks: list[_TrackClock | None] = [None, None]  # CPU, GPU
        self.retired = False  # the producer has moved on to a new sequence

        first = pb.TracePacket()
        first.trusted_packet_sequence_id = seq_id
        first.sequence_flags = _SEQ_CLEARED
        first.incremental_state_cleared = True
        first.first_packet_on_sequence = True
        defaults = first.trace_packet_defaults
        defaults.timestamp_clock_id = INCREMENTAL_CLOCK_ID
        if timebase is not None:
            defaults.perf_sample_defaults.timebase.name = timebase
            if writer.sample_frequency_hz:
                defaults.perf_sample_defaults.timebase.frequency = writer.sample_frequency_hz
        writer._emit(first)
        # Clock 64 of this sequence reads 0 when the trace clock reads 0; every timestamp
        # on it is a delta from the previous one.  All sequences use the same reference,
        # so these snapshots agree with each other and with the writer's own snapshot.
        snapshot = pb.TracePacket()
        snapshot.trusted_packet_sequence_id = seq_id
        clocks = snapshot.clock_snapshot.clocks
        clocks.add(clock_id=INCREMENTAL_CLOCK_ID, timestamp=0, is_incremental=True)
        clocks.add(clock_id=writer.clock_id, timestamp=0)
        writer._emit(snapshot)

    # -- timestamps ---------------------------------------------------------------------
    def timestamp(self, ts: int) -> bytes:
        """The `timestamp` field(s) for a packet at `ts`, advancing the incremental clock;
        a packet earlier than the clock gets an absolute timestamp instead."""
        delta = ts - self.clock
        if delta >= 0:
            self.clock = ts
            return _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)
        return self.absolute_timestamp(ts)

    def track_clock(self, uuid: int, gpu: bool) -> _TrackClock:
        """The incremental clock of track `uuid` on this sequence and the packets waiting
        for the next chunk (see _TrackClock).

        A clock per track: a track's deltas are its slices' durations and the gaps between
        them, instead of the gaps between the interleaved events of unrelated tracks.  A
        track's packets also wait in a list of their own and go into the chunk together,
        so deflate finds a track's previous packet (its best match) close by.  That
        needs the clock per track: an incremental clock must see its packets in time
        order, and the file then holds each track's packets in time order, not all of them.
        Clocks 64..125 go to the first 62 tracks, one each (64 is the sequence default,
        no `timestamp_clock_id` field); later CPU tracks share 126, later GPU tracks 127
        (packets are encoded in time order, so a shared clock still only goes forward)."""
        cell = self.track_clocks.get(uuid)
        if cell is not None:
            return cell
        used = self._own_clocks
        if used < _OWN_CLOCKS or self._shared_clocks[gpu] is None:
            clock_id = INCREMENTAL_CLOCK_ID + used if used < _OWN_CLOCKS else _SHARED_CLOCK[gpu]
            self._own_clocks += used < _OWN_CLOCKS
            if clock_id == INCREMENTAL_CLOCK_ID:
                field = b""  # defined with the sequence
            else:
                field = wire.varint_field(wire.PACKET_TIMESTAMP_CLOCK_ID, clock_id)
                self._define_clock(clock_id)
            packets: list[bytes] = []
            (self.gpu_packets if gpu else self.cpu_packets).append(packets)
            cell = [0, field, packets, packets.extend, self.head_needs + field]
            if used >= _OWN_CLOCKS:
                self._shared_clocks[gpu] = cell
        else:
            cell = self._shared_clocks[gpu]  # type: ignore[assignment]
        self.track_clocks[uuid] = cell
        return cell

    def _define_clock(self, clock_id: int) -> None:
        """A ClockSnapshot defining sequence clock `clock_id` as incremental, 0 at the
        trace clock's 0 (like clock 64 at the sequence's start)."""
        snapshot = pb.TracePacket()
        snapshot.trusted_packet_sequence_id = self.seq_id
        clocks = snapshot.clock_snapshot.clocks
        clocks.add(clock_id=clock_id, timestamp=0, is_incremental=True)
        clocks.add(clock_id=self.writer.clock_id, timestamp=0)
        self.writer._emit(snapshot)

    def absolute_timestamp(self, ts: int) -> bytes:
        """`ts` in the trace's clock domain; leaves the incremental clock where it is."""
        return _TS_TAG + _varint(ts) + self.absolute_clock

    # -- interned fields ----------------------------------------------------------------
    def name_field(self, name: str) -> bytes:
        field = self.name_fields.get(name)
        if field is None:
            field = wire.varint_field(wire.EVENT_NAME_IID, self.event_names.get(name))
            self.name_fields[name] = field
            self.dirty = True
        return field

    def category_field(self, category: str) -> bytes:
        """`category_iids` (nothing for no category: the hot loop then finds b"", which
        is falsy, and comes here; cheap, and only for uncategorized slices)."""
        if not category:
            return b""
        field = self.category_fields.get(category)
        if field is None:
            iid = self.categories.get(category)
            field = wire.varint_field(wire.EVENT_CATEGORY_IIDS, iid)
            self.category_fields[category] = field
            self.dirty = True
        return field

    def annotation_name(self, key: str) -> bytes:
        field = self.annotation_name_fields.get(key)
        if field is None:
            field = wire.annotation_name(self.annotation_names.get(key))
            self.annotation_name_fields[key] = field
            self.dirty = True
        return field

    def annotation(self, key: str, value: model.ArgValue) -> bytes:
        """One debug annotation (arg `debug.<key>` in SQL) with interned name and text.

        Annotations whose value repeats (grid and block sizes, registers, shapes) are
        cached whole, keyed by (key, value) and checked for the value's exact type
        (1, 1.0 and True are equal dict keys); a key with many distinct values (ids,
        timestamps) stops being cached after a while.
        """
        name = self.annotation_name(key)
        kind = type(value)
        if kind is int or (isinstance(value, int) and kind is not bool):
            if _INT64_MIN <= value <= _INT64_MAX:
                encoded = _int_annotation(name, int(value))
            else:
                encoded = wire.string_iid_annotation(name, self._string_iid(str(value)))
        elif kind is bool:
            encoded = wire.bool_annotation(name, value)  # type: ignore[arg-type]
        elif isinstance(value, float):
            encoded = wire.double_annotation(name, value)
        else:
            encoded = wire.string_iid_annotation(name, self._string_iid(value))
        if kind is int or kind is str:
            seen = self._distinct_values.get(key, 0)
            if seen < _DISTINCT_VALUES:
                self._distinct_values[key] = seen + 1
                self.annotation_cache[(key, value)] = encoded
            else:
                self.varying_keys.add(key)
        return encoded

    def args_fields(
        self, items: Iterable[tuple[str, model.ArgValue]], parts: list[bytes]
    ) -> list[bytes] | None:
        """Encode args `items`: annotations whose value may well repeat are appended to
        `parts`, the others returned (they go last in the event); None when every value had
        been seen before (the caller may then cache the whole event head)."""
        cache = self.annotation_cache
        varying = []
        all_known = True
        for item in items:
            encoded = cache.get(item)
            if encoded is not None and type(item[1]) in _CACHED_TYPES:
                parts.append(encoded)
                continue
            all_known = False
            if type(item[1]) is float:
                # Never part of a cached BEGIN (see _FLOAT_OR_BOOL), but a float that
                # repeats (blocks per SM, occupancy) belongs with the constant fields:
                # after the ids it would split their literals into two runs.
                float_key = item
                if not item[1] and copysign(1.0, item[1]) < 0:
                    float_key = (item[0], _NEGATIVE_ZERO)  # -0.0 == 0.0, not the same bits
                encoded = self._float_annotations.get(float_key)
                if encoded is None:
                    encoded = self.annotation(*item)
                    if self._float_repeats(item):
                        self._float_annotations[float_key] = encoded
                    else:
                        varying.append(encoded)
                        continue
                parts.append(encoded)
                continue
            encoded = self.annotation(*item)
            if item in cache and type(item[1]) in _CACHED_TYPES:
                parts.append(encoded)  # cacheable: a value that may well repeat
            else:
                varying.append(encoded)
        return None if all_known else varying

    def _float_repeats(self, item: tuple[str, float]) -> bool:
        """Whether float arg values of this key are still cached (their first
        _DISTINCT_FLOATS values are; the later ones go with the varying values)."""
        key = item[0]
        seen = self._distinct_values.get(key, 0)
        if seen < _DISTINCT_FLOATS:
            self._distinct_values[key] = seen + 1
            return True
        return False

    def annotations(self, args: Iterable[tuple[str, model.ArgValue]]) -> list[bytes]:
        """Every annotation of `args` (for instants: no ordering, no event cache)."""
        cache = self.annotation_cache
        out = []
        for item in args:
            encoded = cache.get(item)
            if encoded is None or type(item[1]) not in _CACHED_TYPES:
                encoded = self.annotation(*item)
            out.append(encoded)
        return out

    def _string_iid(self, value: object) -> int:
        known = self.annotation_strings.ids.get(value)
        if known is not None:
            return known
        self.dirty = True
        return self.annotation_strings.get(value)

    def interned_field(self) -> bytes:
        """The `interned_data` field with every entry interned since the last call (the
        packet that first uses an entry carries it), or b""."""
        data = pb.InternedData()
        self._take_fresh(data)
        payload = data.SerializeToString()
        return wire.len_field(wire.PACKET_INTERNED_DATA, payload) if payload else b""

    def intern_into_chunk(self) -> int:
        """Add the entries interned since the last call to this sequence's interned-data
        packet of the current chunk (made here, in the writer's buffer, on the first call
        of a chunk; encoded when the chunk is flushed); returns about how many bytes that
        adds to the chunk.

        One packet per chunk instead of one per batch of new entries: the strings sit
        together (deflate codes text better in one run) and the per-packet fields go
        (multi_stream: 49 packets, 296 B of 44 kB).  Entries only move earlier in the
        file, and never ahead of the sequence's first packet (made with the sequence)."""
        data = self._chunk_interned
        added = 0
        if data is None:
            data = self._chunk_interned = pb.InternedData()
            self._chunk_interned_packet = bytearray()
            self.writer._buffer.append(self._chunk_interned_packet)
            self.writer._interning_sequences.append(self)
            added = len(self.head_needs) + 8
        return added + self._take_fresh(data)

    def close_chunk_interned(self) -> None:
        """Encode the chunk's interned-data packet into its place in the buffer."""
        data = self._chunk_interned
        if data is not None:
            self._chunk_interned = None
            self._chunk_interned_packet[:] = _frame_packet(
                wire.len_field(wire.PACKET_INTERNED_DATA, data.SerializeToString())
                + self.head_needs
            )

    def _take_fresh(self, data: pb.InternedData) -> int:
        """Move the entries interned since the last call into `data`; returns about how
        many bytes they add to it."""
        self.dirty = False
        size = 0
        for iid, name in self.event_names.fresh:
            data.event_names.add(iid=iid, name=str(name))
            size += len(str(name))
        for iid, name in self.categories.fresh:
            data.event_categories.add(iid=iid, name=str(name))
        for iid, name in self.annotation_names.fresh:
            data.debug_annotation_names.add(iid=iid, name=str(name))
            size += len(str(name))
        for iid, value in self.annotation_strings.fresh:
            encoded = str(value).encode("utf-8", "replace")
            data.debug_annotation_string_values.add(iid=iid, str=encoded)
            size += len(encoded)
        for iid, text in self.strings.fresh:
            kind, value = text  # type: ignore[misc]
            target = data.function_names if kind == "f" else data.mapping_paths
            target.add(iid=iid, str=value.encode("utf-8", "replace"))
        for iid, key in self.mappings.fresh:
            path_iid, build_id = key  # type: ignore[misc]
            m = data.mappings.add(iid=iid)
            m.path_string_ids.append(path_iid)
            if build_id:
                data.build_ids.add(iid=iid, str=build_id.encode())
                m.build_id = iid
        for iid, key in self.frames.fresh:
            fn_iid, mapping_iid, rel_pc = key  # type: ignore[misc]
            data.frames.add(iid=iid, function_name_id=fn_iid, mapping_id=mapping_iid, rel_pc=rel_pc)
        for iid, frame_ids in self.callstacks.fresh:
            data.callstacks.add(iid=iid, frame_ids=frame_ids)  # type: ignore[arg-type]
        for table in (
            self.event_names,
            self.categories,
            self.annotation_names,
            self.annotation_strings,
            self.strings,
            self.mappings,
            self.frames,
            self.callstacks,
        ):
            size += 8 * len(table.fresh)
            table.fresh.clear()
        return size

    def callstack_iid(self, stack: model.Stack) -> int:
        known = self.callstacks.ids.get(stack)
        if known is not None:
            return known
        self.dirty = True
        frame_ids = []
        for fr in stack.frames:
            fn = self.strings.get(("f", fr.function))
            mapping = self.mappings.get(
                (self.strings.get(("m", fr.module or "[unknown]")), fr.build_id)
            )
            frame_ids.append(self.frames.get((fn, mapping, fr.rel_pc)))
        iid = len(self.callstacks.ids) + 1
        self.callstacks.ids[stack] = iid
        self.callstacks.fresh.append((iid, frame_ids))
        return iid

    # -- packets ------------------------------------------------------------------------
    def track_event(
        self,
        timestamp: bytes,
        kind: int,
        uuid: int,
        name: str,
        category: str,
        args: Iterable[tuple[str, model.ArgValue]] = (),
    ) -> bytes:
        """A framed TrackEvent packet (an INSTANT; BEGINs come from Producer's hot loop)
        with interned name, category and args.  `timestamp` is the encoded field from
        timestamp()/absolute_timestamp()."""
        event = b"".join(
            (
                _event_head(kind, uuid),
                self.name_field(name),
                self.category_field(category),
                *self.annotations(args),
            )
        )
        body = b"".join(
            (
                wire.len_field(wire.PACKET_TRACK_EVENT, event),
                self.head_needs,
                timestamp,
                self.interned_field() if self.dirty else b"",
            )
        )
        return wire.frame(body)


_CACHED_TYPES = frozenset((int, str))
# The float cache's key for -0.0, which equals 0.0 as a dict key but is encoded otherwise.
_NEGATIVE_ZERO = "-0.0"
# LaneSet.last_starts, LaneSet.open_ends, LaneSet.place, lane track uuids
_LaneEntry = tuple[list[int], list[list[int]], Callable[[int, int], int], list[int]]
_BEGIN_CACHE_SIZE = 1 << 16
# Distinct values of one arg key that are cached before the key counts as varying (64:
# 0.1-1.6% smaller converted traces than 256, 16 or 32; docs/benchmarks.md).
_DISTINCT_VALUES = 64
# The same for float args, which are never part of a cached BEGIN: bandwidths take more
# than 64 values that still repeat (256: multi_stream 136 B smaller than with 64).
_DISTINCT_FLOATS = 256


class Producer:
    """Writes the events of one source (cupti, ebpf, kineto...) on its own sequences."""

    def __init__(self, writer: TraceWriter, name: str, seq_id: int) -> None:
        self.writer = writer
        self.name = name
        self._sample_seqs: dict[str, _Sequence] = {}
        self._pending: list[model.CpuSlice | model.GpuOp] = []
        # Slices begun but not ended: (end ts, -order, encoded END packet minus its
        # timestamp, its track's clock); order makes the inner of two slices ending
        # together end first.
        self._open: list[tuple[int, int, bytes, list]] = []
        self._order = 0
        self._flows = _FlowIds(len(writer._producers) << 44)
        self._start_sequence(seq_id)
        # (device, stream) / (pid, tid) -> the writer's LaneSet for it (its lists and its
        # place()) and the lanes' track uuids.
        self._stream_lanes: dict[tuple[int, int], _LaneEntry] = {}
        self._thread_lanes: dict[tuple[int, int], _LaneEntry] = {}

    def _start_sequence(self, seq_id: int) -> None:
        """Track events go on sequence `seq_id` from now on (with caches of its own)."""
        old = getattr(self, "_seq", None)
        if old is not None:
            old.retired = True  # its packets go into the next chunk, then it is dropped
        self._seq = _Sequence(self.writer, seq_id)
        self.writer._track_sequences.append(self._seq)
        # The latest BEGIN written on the sequence: a window of slices mostly earlier
        # than this goes on a new sequence (see flush()).
        self._latest = 0
        # Per track uuid: the encoded head of its BEGIN events (type, uuid, and for a GPU
        # stream lane its device and stream annotations) and its END packet.
        self._begin_heads: dict[int, bytes] = {}
        self._end_packets: dict[int, bytes] = {}
        # (uuid, name, category, *arg keys, *arg values) -> the encoded constant part of
        # the BEGIN event: what most BEGINs are, since kernels repeat.
        self._begin_cache: dict[tuple[object, ...], bytes] = {}

    def write(self, event: model.Event) -> None:
        if isinstance(event, (model.CpuSlice, model.GpuOp)):
            self._pending.append(event)
            if len(self._pending) >= REORDER_WINDOW:
                self.flush()
        elif isinstance(event, model.CpuSample):
            self._write_sample(
                event.pid, event.tid, event.ts, event.stack, CPU_SAMPLE_TIMEBASE, event.cpu
            )
        elif isinstance(event, model.ThreadInfo):
            self.writer.tracks.thread(event.pid, event.tid, event.name)
        elif isinstance(event, model.ProcessInfo):
            self.writer.tracks.process(event.pid, event.name, event.cmdline)
        elif isinstance(event, model.GpuDevice):
            self.writer.tracks.gpu_device(event.device, event.name)
        elif isinstance(event, model.Instant):
            self._write_instant(event)
        elif isinstance(event, model.SliceBatch):
            batch_writer.write_batch(self, event)
        else:
            raise TypeError(f"not a trace event: {event!r}")

    def write_all(self, events: Iterable[model.Event]) -> None:
        pending = self._pending
        room = REORDER_WINDOW - len(pending)
        for event in events:
            kind = type(event)
            if kind is _GpuOp or kind is _CpuSlice:
                pending.append(event)
                room -= 1
                if room <= 0:
                    self.flush()
                    pending = self._pending
                    room = REORDER_WINDOW
            else:
                self.write(event)

    def flush(self) -> None:
        """Place buffered slices on lanes in start order and write their BEGINs (and the
        ENDs that are due before them)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        # Start order, the longer of two slices starting together first (it becomes the
        # parent).  Sorting by start alone is a C-level key; only when two slices do start
        # together is the full key needed.
        pending.sort(key=_BY_TS)
        starts = [e.ts for e in pending]
        if any(map(eq, starts, islice(starts, 1, None))):
            pending.sort(key=_start_order)
        if bisect_left(starts, self._latest) > _LATE_SLICES:
            # This window goes back in time (sources that write in no time order, such as
            # Kineto's JSON): rather than absolute timestamps for its slices, a new
            # sequence with a clock of its own, once the open slices are ended (ENDs that
            # are written early still sort into place in trace_processor).
            self._end_until(None)
            self._start_sequence(self.writer._next_seq_id())
            self._flows.new_sequence()
        self._write_slices(pending)
        self.writer.counts["slices"] += len(pending)
        self.writer.note_ts(pending[0].ts)

    def finish(self) -> None:
        """Write everything still buffered, ENDs included (the producer is done)."""
        self.flush()
        self._end_until(None)

    # -- encoding -----------------------------------------------------------------------
    def _write_slices(self, pending: list[model.CpuSlice | model.GpuOp]) -> None:
        """The hot loop: one BEGIN per slice, ENDs in time order among them.

        Everything it writes is cached bytes (see _Sequence) around a few varints, laid
        out constant parts first and varying values last, so that deflate finds one long
        match per packet.  Method calls, attribute lookups and temporary objects are what
        cost here; the common cases are inlined and the rest goes to methods.
        """
        seq = self._seq
        writer = self.writer
        flows = self._flows
        begun, ended_first, free_flow_ids = flows.begun, flows.ended_first, flows.free
        freed, freed_at = flows.freed, flows.freed_at
        recycled = range(flows.recycle_from, flows.unrecycled_from)
        stream_lanes = self._stream_lanes
        thread_lanes = self._thread_lanes
        begin_heads = self._begin_heads
        end_packets = self._end_packets
        name_fields = seq.name_fields
        category_fields = seq.category_fields
        begin_cache = self._begin_cache
        varying_keys = seq.varying_keys
        annotation_names = seq.annotation_name_fields
        correlation_head = seq.annotation_name("correlation_id") + _ANNOTATION_INT_TAG
        correlation_len = len(correlation_head)
        head_needs = seq.head_needs
        open_ends = self._open
        next_end = open_ends[0][0] if open_ends else _NEVER
        order = self._order
        size = writer._buffered
        chunk_bytes = writer.chunk_bytes
        # Flow ids are handed out in the order slices are encoded, which must be the order
        # trace_processor reads them in (time order): a slice behind the latest BEGIN of
        # earlier windows (maybe not behind its own track's clock) gets fresh ids.  The
        # window is sorted, so that is the only way a slice can be behind.
        latest = self._latest
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
                        stamp = (
                            _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)
                        )
                    else:
                        end_packet, stamp = self._late_end(end_packet, cell, end_ts)
                    n = len(end_packet) + len(stamp)
                    cell[3]((_FRAME[n], end_packet, stamp))
                    size += n + 2
                next_end = open_ends[0][0] if open_ends else _NEVER
            if freed and ts > freed_at:
                # Flow ids freed at an earlier time: free for this slice.  Not for one
                # that starts when a flow ended: trace_processor reads the packets of
                # one time in file order, and the end may be in a later track's list.
                for fid in freed:
                    heappush(free_flow_ids, fid)
                freed.clear()
            dur = ev.dur
            end = ts + dur if dur > 0 else ts
            gpu = type(ev) is _GpuOp
            if gpu:
                lanes = stream_lanes.get((ev.device, ev.stream)) or self._lanes(ev)
                corr = ev.correlation_id
            else:
                lanes = thread_lanes.get((ev.pid, ev.tid)) or self._lanes(ev)  # type: ignore[union-attr]
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
            uuid = uuids[index] if index < len(uuids) else self._new_lane(ev, index)
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
            if varying_keys.isdisjoint(args):
                key = (uuid, ev.name, ev.category, *args, *args.values())
                cached = begin_cache.get(key)
                if cached is not None and _FLOAT_OR_BOOL.isdisjoint(map(type, args.values())):
                    parts = [cached]
                    varying = ()
                else:
                    parts = [
                        begin_heads.get(uuid) or self._begin_head(uuid, ev),
                        name_fields.get(ev.name) or seq.name_field(ev.name),
                        category_fields.get(ev.category) or seq.category_field(ev.category),
                    ]
                    varying = seq.args_fields(args.items(), parts)
                    if varying is None:  # every value seen before: worth caching
                        varying = ()
                        if len(begin_cache) < _BEGIN_CACHE_SIZE:
                            begin_cache[key] = b"".join(parts)
            elif len(args) == 1:
                # Only an id, such as a CUDA API call's correlation id.
                ((arg, value),) = args.items()
                parts = [
                    begin_cache.get((uuid, ev.name, ev.category)) or self._begin_plain(uuid, ev)
                ]
                varying = (
                    (_int_annotation(annotation_names[arg], value),)
                    if type(value) is int and 0 <= value <= _INT64_MAX
                    else (seq.annotation(arg, value),)
                )
            else:
                parts, varying = self._begin_with_varying_args(uuid, ev)
            # Then what varies: flows, correlation id, args with values seen rarely.
            fids = ev.flow_ids
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
                    value = _SMALL[corr] if corr < _SMALL_LIMIT else _varint3(corr)
                    parts += (_ANNOTATION[correlation_len + len(value)], correlation_head, value)
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
            end_packet = end_packets.get(uuid) or self._end_packet(uuid)
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
                writer._buffered = size
                writer._flush_buffer()
                size = 0
            if corr is None and type(ev) is _CpuSlice and ev.launch_stack is not None:
                writer._buffered = size
                self._write_sample(ev.pid, ev.tid, ts, ev.launch_stack, LAUNCH_STACK_TIMEBASE, None)
                size = writer._buffered
        self._latest = max(latest, pending[-1].ts)
        flows.freed_at = freed_at
        writer._buffered = size
        self._order = order

    def _begin_plain(self, uuid: int, ev: model.CpuSlice | model.GpuOp) -> bytes:
        """The cached BEGIN head without args: track, name, category."""
        seq = self._seq
        head = (
            (self._begin_heads.get(uuid) or self._begin_head(uuid, ev))
            + seq.name_field(ev.name)
            + seq.category_field(ev.category)
        )
        if len(self._begin_cache) < _BEGIN_CACHE_SIZE:
            self._begin_cache[(uuid, ev.name, ev.category)] = head
        return head

    def _begin_with_varying_args(
        self, uuid: int, ev: model.CpuSlice | model.GpuOp
    ) -> tuple[list[bytes], list[bytes]]:
        """A BEGIN whose args include ids (varying keys): the rest is cached as usual, the
        ids are encoded each time and go last."""
        seq = self._seq
        varying_keys = seq.varying_keys
        items = ev.args.items()
        stable = [item for item in items if item[0] not in varying_keys]
        key = (uuid, ev.name, ev.category, *stable)
        cached = self._begin_cache.get(key)
        if cached is not None and all(type(value) in _CACHED_TYPES for _, value in stable):
            parts = [cached]
            varying = []
        else:
            parts = [
                self._begin_heads.get(uuid) or self._begin_head(uuid, ev),
                seq.name_field(ev.name),
                seq.category_field(ev.category),
            ]
            varying = seq.args_fields(stable, parts)  # type: ignore[assignment]
            if varying is None:
                varying = []
                if len(self._begin_cache) < _BEGIN_CACHE_SIZE:
                    self._begin_cache[key] = b"".join(parts)
        varying += [seq.annotation(k, v) for k, v in items if k in varying_keys]
        return parts, varying

    def _lanes(self, ev: model.CpuSlice | model.GpuOp) -> _LaneEntry:
        """The lanes of the track `ev` goes to and their uuids, cached per producer."""
        tracks = self.writer.tracks
        if type(ev) is _GpuOp:
            lane_set, uuids = tracks.stream_lanes(ev.device, ev.stream)
            key = (ev.device, ev.stream)
            lanes = self._stream_lanes
        else:
            lane_set, uuids = tracks.thread_lanes(ev.pid, ev.tid)  # type: ignore[union-attr]
            key = (ev.pid, ev.tid)  # type: ignore[union-attr]
            lanes = self._thread_lanes
        entry = lanes[key] = (lane_set.last_starts, lane_set.open_ends, lane_set.place, uuids)
        return entry

    def _new_lane(self, ev: model.CpuSlice | model.GpuOp, index: int) -> int:
        tracks = self.writer.tracks
        if type(ev) is _GpuOp:
            return tracks.add_stream_lanes(ev.device, ev.stream, index)
        return tracks.add_thread_lanes(ev.pid, ev.tid, index)  # type: ignore[union-attr]

    def _end_until(self, limit: int | None) -> None:
        """Write the ENDs due by `limit` (all of them for None)."""
        open_ends = self._open
        while open_ends and (limit is None or open_ends[0][0] <= limit):
            end_ts, _, end_packet, cell = heappop(open_ends)
            delta = end_ts - cell[0]
            if delta >= 0:
                cell[0] = end_ts
                stamp = _varint_field_ts(delta)
            else:
                end_packet, stamp = self._late_end(end_packet, cell, end_ts)
            n = len(end_packet) + len(stamp)
            cell[3]((_frame_head(n), end_packet, stamp))
            self.writer._buffered += n + 3

    def _late_end(self, end_packet: bytes, cell: _TrackClock, end_ts: int) -> tuple[bytes, bytes]:
        """An END earlier than its track's clock: the packet without the clock id, and an
        absolute timestamp (which names the trace clock instead)."""
        if cell[1]:
            end_packet = end_packet[: -len(cell[1])]
        return end_packet, self._seq.absolute_timestamp(end_ts)

    def _begin_head(self, uuid: int, ev: model.CpuSlice | model.GpuOp) -> bytes:
        if type(ev) is _GpuOp:
            return self._begin_head_of(uuid, ev.device, ev.stream)
        return self._begin_head_of(uuid, None, 0)

    def _begin_head_of(self, uuid: int, device: int | None, stream: int) -> bytes:
        """The start of every BEGIN on track `uuid`: type and track, and for a GPU stream
        lane (`device` not None) its device and stream, constant args of the lane."""
        head = _event_head(_TYPE_BEGIN, uuid)
        if device is not None:
            seq = self._seq
            head += seq.annotation("device", device) + seq.annotation("stream", stream)
        self._begin_heads[uuid] = head
        return head

    def _end_packet(self, uuid: int) -> bytes:
        """An END packet without its timestamp (which goes last), with the clock id of
        its track (see _late_end for an END that cannot use the clock)."""
        event = _event_head(_TYPE_END, uuid)
        packet = (
            wire.len_field(wire.PACKET_TRACK_EVENT, event)
            + self._seq.head
            + self._seq.track_clocks[uuid][1]
        )
        self._end_packets[uuid] = packet
        return packet

    def _write_instant(self, ev: model.Instant) -> None:
        # Instants are written as they come, while slices wait in the reorder window:
        # an absolute timestamp keeps them from moving the incremental clock, and the
        # thread's own track (an instant nests anywhere) keeps them out of lane placement,
        # where one would push the window's earlier slices onto extra lanes.
        seq = self._seq
        uuid = self.writer.tracks.thread(ev.pid, ev.tid, None)
        self.writer._emit_bytes(
            seq.track_event(
                seq.absolute_timestamp(ev.ts),
                _TYPE_INSTANT,
                uuid,
                ev.name,
                ev.category,
                ev.args.items(),
            )
        )

    def _write_sample(
        self, pid: int, tid: int, ts: int, stack: model.Stack, timebase: str, cpu: int | None
    ) -> None:
        seq = self._sample_sequence(timebase)
        self.writer.tracks.thread(pid, tid, None)
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
        self.writer._emit_bytes(wire.frame(body))
        self.writer.note_ts(ts)
        key = "cpu_samples" if timebase == CPU_SAMPLE_TIMEBASE else "launch_stacks"
        self.writer.counts[key] += 1

    def _sample_sequence(self, timebase: str) -> _Sequence:
        """The sequence of this producer's samples of one timebase (CPU, launch stacks)."""
        seq = self._sample_seqs.get(timebase)
        if seq is None:
            seq = self._sample_seqs[timebase] = _Sequence(
                self.writer, self.writer._next_seq_id(), timebase
            )
        return seq


class _FlowIds:
    """Source flow ids -> the flow ids written: small ones, recycled.

    Sources name a flow after its correlation (`pid << 32 | correlation id`): large,
    unique numbers that cost up to 8 incompressible bytes per end.  trace_processor only
    pairs the two ends of a flow (the id is not in the flow table) and lets an id be used
    again once its flow has ended, so a producer hands out the smallest free id; ids then
    repeat a lot and deflate well.  Each producer has ids of its own (`base`).

    trace_processor pairs ends in timestamp order, and an id may be recycled only if that
    is also the order in which the producer encoded them: true for slices encoded in time
    order on one sequence, false for a "late" slice (behind the latest BEGIN) or across a
    change of sequence (the new one goes back in time).  So only flows begun in time order
    since the last change of sequence give their id back; a flow begun late, or whose end
    is written first (its start may be late, i.e. earlier), gets an id never recycled.
    Packets of one time are read in file order, and the file holds them track by track
    (see _Sequence.track_clock), so an id freed at time t is taken again only after t.
    """

    def __init__(self, base: int) -> None:
        # Attributes the hot loop uses directly for its single-id cases.
        self.begun: dict[int, int] = {}  # source id -> id: begun, not yet ended
        self.ended_first: dict[int, int] = {}  # source id -> id: end written before start
        self.free: list[int] = []  # min-heap of recyclable ids
        # Ids whose flows ended at time `freed_at`: recyclable from the next time on.
        self.freed: list[int] = []
        self.freed_at = 0
        self.next_id = self.recycle_from = base + 1
        self.next_unrecycled = self.unrecycled_from = base + (1 << 40)

    def new_sequence(self) -> None:
        """The producer's packets go back in time: no id given out so far is recycled."""
        self.free.clear()
        self.freed.clear()
        self.recycle_from = self.next_id

    def _new(self, late: bool) -> int:
        if late:
            self.next_unrecycled += 1
            return self.next_unrecycled - 1
        if self.free:
            return heappop(self.free)
        self.next_id += 1
        return self.next_id - 1

    def starts(self, source_ids: Iterable[int], late: bool) -> bytes:
        """The encoded `flow_ids` of a slice that starts (or continues) these flows."""
        out = []
        for source in source_ids:
            fid = self.begun.get(source)
            if fid is None:
                fid = self.ended_first.pop(source, None)
                if fid is None:
                    fid = self.begun[source] = self._new(late)
            out.append(_FLOW.pack(_FLOW_TAG, fid))
        return b"".join(out)

    def ends(self, source_ids: Iterable[int], late: bool, ts: int) -> bytes:
        """The encoded `terminating_flow_ids` of a slice at `ts` that ends these flows."""
        out = []
        for source in source_ids:
            fid = self.begun.pop(source, None)
            if fid is None:
                fid = self.ended_first[source] = self._new(True)
            elif self.recycle_from <= fid < self.unrecycled_from:
                if late:  # earlier than any slice still to come
                    heappush(self.free, fid)
                else:
                    self.freed.append(fid)
                    self.freed_at = ts
            out.append(_FLOW.pack(_TERMINATING_FLOW_TAG, fid))
        return b"".join(out)


def _start_order(ev: model.CpuSlice | model.GpuOp) -> tuple[int, int]:
    return ev.ts, -ev.dur


def _varint_field_ts(delta: int) -> bytes:
    """The `timestamp` field of a delta."""
    return _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)


def _frame_head(n: int) -> bytes:
    return _FRAME[n] if n < _SMALL_LIMIT else _FRAME_TAG + _varint(n)


class _Tracks:
    """Track uuids and descriptors: processes, threads (+ lanes), GPUs, streams (+ lanes)."""

    def __init__(self, writer: TraceWriter) -> None:
        self._writer = writer
        self._next_uuid = 1
        self._processes: dict[int, int] = {}
        self._threads: dict[tuple[int, int], int] = {}
        self._thread_names: dict[tuple[int, int], str] = {}
        self._thread_lanes: dict[tuple[int, int], tuple[LaneSet, list[int]]] = {}
        self._gpus: dict[int, int] = {}
        self._gpu_names: dict[int, str] = {}
        self._stream_lanes: dict[tuple[int, int], tuple[LaneSet, list[int]]] = {}
        self.metadata_track = 0

    def _uuid(self) -> int:
        uuid = self._next_uuid
        self._next_uuid += 1
        return uuid

    def _descriptor(self, fill: pb.TrackDescriptor) -> None:
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self._writer.descriptor_seq_id
        pkt.track_descriptor.CopyFrom(fill)
        self._writer._emit(pkt)

    def process(self, pid: int, name: str | None = None, cmdline: tuple[str, ...] = ()) -> int:
        uuid = self._processes.get(pid)
        if uuid is not None and name is None:
            return uuid
        if uuid is None:
            uuid = self._processes[pid] = self._uuid()
        desc = pb.TrackDescriptor(uuid=uuid)
        desc.process.pid = pid
        if name:
            desc.process.process_name = name
        if cmdline:
            desc.process.cmdline.extend(cmdline)
        self._descriptor(desc)
        return uuid

    def thread(self, pid: int, tid: int, name: str | None) -> int:
        key = (pid, tid)
        uuid = self._threads.get(key)
        if uuid is not None and (name is None or self._thread_names.get(key) == name):
            return uuid
        parent = self.process(pid)
        if uuid is None:
            uuid = self._threads[key] = self._uuid()
        if name:
            self._thread_names[key] = name
        self._describe_thread(uuid, parent, pid, tid, self._thread_names.get(key))
        # Lanes share the thread's name, so rename them too.
        lanes = self._thread_lanes.get(key)
        if lanes and name:
            for lane_uuid in lanes[1][1:]:
                self._describe_lane(lane_uuid, uuid, name)
        return uuid

    def _describe_thread(
        self, uuid: int, parent: int, pid: int, tid: int, name: str | None
    ) -> None:
        desc = pb.TrackDescriptor(uuid=uuid, parent_uuid=parent)
        desc.thread.pid = pid
        desc.thread.tid = tid
        if name:
            desc.thread.thread_name = name
        self._descriptor(desc)

    def _describe_lane(self, uuid: int, thread_uuid: int, name: str | None) -> None:
        """An extra lane of a thread: a child of the thread's own track, so trace_processor
        keeps it on the thread (same utid; a lane with its own thread descriptor got a utid
        of its own), and never merged with its siblings (slices of different lanes would
        then close each other)."""
        desc = pb.TrackDescriptor(uuid=uuid, parent_uuid=thread_uuid)
        if name:
            desc.name = name
        desc.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
        self._descriptor(desc)

    def thread_lane(self, pid: int, tid: int, ts: int, dur: int) -> int:
        lane_set, uuids = self.thread_lanes(pid, tid)
        index = lane_set.place(ts, dur)
        return uuids[index] if index < len(uuids) else self.add_thread_lanes(pid, tid, index)

    def thread_lanes(self, pid: int, tid: int) -> tuple[LaneSet, list[int]]:
        """The thread's lanes and their track uuids (the thread's own track first)."""
        entry = self._thread_lanes.get((pid, tid))
        if entry is None:
            entry = self._thread_lanes[(pid, tid)] = (LaneSet(), [self.thread(pid, tid, None)])
        return entry

    def add_thread_lanes(self, pid: int, tid: int, index: int) -> int:
        """Tracks for lanes up to `index`: another track of the same thread (same
        pid/tid/name) per lane."""
        uuids = self.thread_lanes(pid, tid)[1]
        while index >= len(uuids):
            lane_uuid = self._uuid()
            self._describe_lane(lane_uuid, uuids[0], self._thread_names.get((pid, tid)))
            uuids.append(lane_uuid)
            self._writer.counts["extra_lanes"] += 1
        return uuids[index]

    def gpu_device(self, device: int, name: str | None) -> int:
        uuid = self._gpus.get(device)
        if uuid is not None and (name is None or self._gpu_names.get(device) == name):
            return uuid
        if uuid is None:
            uuid = self._gpus[device] = self._uuid()
        if name:
            self._gpu_names[device] = name
        label = self._gpu_names.get(device)
        desc = pb.TrackDescriptor(
            uuid=uuid, name=f"GPU {device} ({label})" if label else f"GPU {device}"
        )
        # Keep GPUs and their streams in numeric order in the UI.
        desc.child_ordering = pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
        desc.sibling_order_rank = device if _INT32_MIN <= device <= _INT32_MAX else _INT32_MAX
        self._descriptor(desc)
        return uuid

    def stream_lane(self, device: int, stream: int, ts: int, dur: int) -> int:
        lane_set, uuids = self.stream_lanes(device, stream)
        index = lane_set.place(ts, dur)
        return uuids[index] if index < len(uuids) else self.add_stream_lanes(device, stream, index)

    def stream_lanes(self, device: int, stream: int) -> tuple[LaneSet, list[int]]:
        """The stream's lanes and their track uuids (created with the first op)."""
        entry = self._stream_lanes.get((device, stream))
        if entry is None:
            entry = self._stream_lanes[(device, stream)] = (LaneSet(), [])
        return entry

    def add_stream_lanes(self, device: int, stream: int, index: int) -> int:
        """Tracks for lanes up to `index`: `Stream N` tracks under the GPU's."""
        uuids = self.stream_lanes(device, stream)[1]
        while index >= len(uuids):
            lane_uuid = self._uuid()
            desc = pb.TrackDescriptor(
                uuid=lane_uuid, parent_uuid=self.gpu_device(device, None), name=_stream_name(stream)
            )
            # The rank is an int32; ops on no stream (Kineto: 2**32-1 or -1) and other ids
            # outside it sort last.
            desc.sibling_order_rank = stream if _INT32_MIN <= stream <= _INT32_MAX else _INT32_MAX
            self._descriptor(desc)
            uuids.append(lane_uuid)
            if len(uuids) > 1:
                self._writer.counts["extra_lanes"] += 1
        return uuids[index]


def _stream_name(stream: int) -> str:
    return "no stream" if stream in model.NO_STREAM_IDS else f"Stream {stream}"


class TraceWriter:
    """Streaming writer of one .perfetto-trace file.  Use as a context manager."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        command_line: Iterable[str] = (),
        clock_id: int = pb.BUILTIN_CLOCK_BOOTTIME,
        clock_snapshot: Mapping[int, int] | None = None,
        sample_frequency_hz: int = 0,
        compression_level: int = DEFAULT_COMPRESSION_LEVEL,
        compress_in_thread: bool = False,
    ) -> None:
        """`clock_id` is the domain of every timestamp written; `clock_snapshot` maps
        builtin clock ids to readings taken at one instant (required unless the domain
        is BOOTTIME, trace_processor's default).  `compress_in_thread` deflates chunks on
        a thread of their own (zlib releases the GIL), which only pays with a free core."""
        from collector import __version__

        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self.clock_id = clock_id
        self.sample_frequency_hz = sample_frequency_hz
        self.compression_level = compression_level
        self.chunk_bytes = (
            LARGE_CHUNK_BYTES if compression_level > DEFAULT_COMPRESSION_LEVEL else CHUNK_BYTES
        )
        self._file: BinaryIO | None = open(self.tmp_path, "wb")  # noqa: SIM115
        self._deflater = _Deflater(self._file, compression_level, compress_in_thread)
        self._buffer: list[bytes] = []
        # Sequences with track packets in per-track lists (see _Sequence.track_clock).
        self._track_sequences: list[_Sequence] = []
        # Sequences with an interned-data packet in the buffer (see intern_into_chunk).
        self._interning_sequences: list[_Sequence] = []
        self._buffered = 0
        self._seq_counter = 0
        self.min_ts: int | None = None
        self.counts: dict[str, int] = {
            "slices": 0,
            "cpu_samples": 0,
            "launch_stacks": 0,
            "extra_lanes": 0,
        }
        self._metadata: dict[str, model.ArgValue] = {
            "tool": TOOL_NAME,
            "tool_version": __version__,
            "command_line": " ".join(command_line) or " ".join(sys.argv),
        }
        if sample_frequency_hz:
            self._metadata["cpu_sample_frequency_hz"] = sample_frequency_hz
        self._producers: list[Producer] = []
        self.descriptor_seq_id = self._next_seq_id()
        self._write_clock_snapshot(clock_snapshot)
        self.tracks = _Tracks(self)

    # -- public API ---------------------------------------------------------------------
    def producer(self, name: str) -> Producer:
        prod = Producer(self, name, self._next_seq_id())
        self._producers.append(prod)
        return prod

    def set_metadata(self, key: str, value: model.ArgValue) -> None:
        self._metadata[key] = value

    def close(self) -> Path:
        """Flush everything, write the metadata, and move the file into place."""
        if self._file is None:
            return self.path
        for prod in self._producers:
            prod.finish()
        self._write_metadata()
        self._flush_buffer()
        self._deflater.finish()
        self._file.close()
        self._file = None
        os.replace(self.tmp_path, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file: nothing half-written is left under any name."""
        if self._file is not None:
            self._deflater.finish(raise_error=False)
            self._file.close()
            self._file = None
        self.tmp_path.unlink(missing_ok=True)

    @property
    def bytes_written(self) -> int:
        return self._deflater.bytes_written

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- internals ----------------------------------------------------------------------
    def note_ts(self, ts: int) -> None:
        if self.min_ts is None or ts < self.min_ts:
            self.min_ts = ts

    def _next_seq_id(self) -> int:
        self._seq_counter += 1
        return self._seq_counter

    def _emit(self, pkt: pb.TracePacket) -> None:
        self._emit_bytes(_frame_packet(pkt.SerializeToString()))

    def _emit_bytes(self, framed: bytes) -> None:
        self._buffer.append(framed)
        self._buffered += len(framed)
        if self._buffered >= self.chunk_bytes:
            self._flush_buffer()

    def _emit_framed(self, *parts: bytes) -> None:
        """A packet given as pieces (frame head first): no join needed until the chunk."""
        self._buffer.extend(parts)
        self._buffered += sum(map(len, parts))
        if self._buffered >= self.chunk_bytes:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        """Hand the buffered packets to the deflater as one chunk."""
        if self._file is None:
            return
        # Descriptors, clock snapshots, interned data, instants and samples first, then
        # each sequence's track packets track by track: CPU tracks before GPU tracks, so
        # that an API call's flow begins before a GPU op of the same time ends it.
        chunk = self._buffer
        for seq in self._interning_sequences:
            seq.close_chunk_interned()
        self._interning_sequences.clear()
        for seq in self._track_sequences:
            for packets in (*seq.cpu_packets, *seq.gpu_packets):
                chunk += packets
                packets.clear()
        if self._track_sequences[-1:] and any(seq.retired for seq in self._track_sequences):
            self._track_sequences = [seq for seq in self._track_sequences if not seq.retired]
        if chunk:
            self._deflater.put(b"".join(chunk))
        chunk.clear()
        self._buffered = 0

    def _write_clock_snapshot(self, snapshot: Mapping[int, int] | None) -> None:
        if snapshot is None:
            if self.clock_id != pb.BUILTIN_CLOCK_BOOTTIME:
                snapshot = capture_clock_snapshot()
            else:
                snapshot = {pb.BUILTIN_CLOCK_BOOTTIME: 0}
        # The trace clock's reading at the snapshot: a time trace_processor can always
        # convert (see _first_ts_hint).
        self._snapshot_ts = snapshot.get(self.clock_id, 0)
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self.descriptor_seq_id
        pkt.clock_snapshot.primary_trace_clock = pb.BUILTIN_CLOCK_BOOTTIME
        for clock, reading in snapshot.items():
            pkt.clock_snapshot.clocks.add(clock_id=clock, timestamp=reading)
        self._emit(pkt)

    def _write_metadata(self) -> None:
        """One instant on an `xpu-perf` track whose args are the run's facts and counters."""
        for key, value in self.counts.items():
            self._metadata.setdefault(f"writer.{key}", value)
        uuid = self.tracks._uuid()
        desc = pb.TrackDescriptor(uuid=uuid, name=TOOL_NAME)
        self.tracks._descriptor(desc)
        # On the descriptor sequence, with its name, category and args written out
        # instead of interned: one packet, used once, needs no sequence of its own (a
        # first packet and a clock snapshot) and no interning table (an iid per string).
        # Same SQL rows: trace_processor reads inline and interned names alike.
        pkt = pb.TracePacket(
            trusted_packet_sequence_id=self.descriptor_seq_id,
            timestamp=self._first_ts_hint(),
            timestamp_clock_id=self.clock_id,
        )
        event = pkt.track_event
        event.type = _TYPE_INSTANT
        event.track_uuid = uuid
        event.name = "xpu-perf metadata"
        event.categories.append(METADATA_CATEGORY)
        for key, value in self._metadata.items():
            _set_annotation(event.debug_annotations.add(name=key), value)
        self._emit(pkt)

    def _first_ts_hint(self) -> int:
        # The metadata instant only needs a timestamp inside the trace's time range.  With
        # no event, not 0 but the snapshot's time: MONOTONIC 0 converts to a negative
        # BOOTTIME time where the two clocks are equal (no suspend) and BOOTTIME was read
        # first, and trace_processor drops negative times (and the metadata with them).
        return self.min_ts if self.min_ts is not None else self._snapshot_ts


def _set_annotation(annotation: pb.DebugAnnotation, value: model.ArgValue) -> None:
    """The value of a debug annotation, typed as _Sequence.annotation types it (ints out
    of int64 range as text)."""
    if isinstance(value, bool):
        annotation.bool_value = value
    elif isinstance(value, int) and _INT64_MIN <= value <= _INT64_MAX:
        annotation.int_value = value
    elif isinstance(value, float):
        annotation.double_value = value
    else:
        annotation.string_value = str(value)


class _Deflater:
    """Writes chunks of packets to the file, each deflated into one `compressed_packets`
    packet (trace_processor inflates them transparently), on the caller's thread or on a
    thread of its own.  Chunks are written in the order they are given."""

    def __init__(self, file: BinaryIO, level: int, threaded: bool) -> None:
        self._file = file
        self._level = level
        self.bytes_written = 0
        self._error: BaseException | None = None
        self._queue: queue.Queue[bytes | None] | None = None
        if threaded:
            self._queue = queue.Queue(maxsize=2)  # bounded: encoding waits for deflate
            self._thread = threading.Thread(target=self._run, name="xpu-perf-deflate")
            self._thread.daemon = True
            self._thread.start()

    def put(self, chunk: bytes) -> None:
        if self._queue is None:
            self._write(chunk)
            return
        if self._error is not None:
            raise self._error
        self._queue.put(chunk)

    def finish(self, raise_error: bool = True) -> None:
        """Wait until every chunk is in the file; re-raise a failure of the thread."""
        if self._queue is not None:
            self._queue.put(None)
            self._thread.join()
            self._queue = None
        if self._error is not None and raise_error:
            raise self._error

    def _write(self, chunk: bytes) -> None:
        if self._level > 0:
            # libdeflate, not zlib: the same zlib stream (what trace_processor inflates)
            # 3-4x faster at level 6, and 4-5% smaller than zlib can make at level 10+.
            chunk = wire.frame(
                wire.len_field(wire.PACKET_COMPRESSED, deflate.zlib_compress(chunk, self._level))
            )
        self._file.write(chunk)
        self.bytes_written += len(chunk)

    def _run(self) -> None:
        assert self._queue is not None
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._write(chunk)
                except BaseException as exc:  # re-raised on the writer's thread
                    self._error = exc


def capture_clock_snapshot() -> dict[int, int]:
    """Readings of the clocks trace_processor can convert between, taken back to back."""
    return {
        pb.BUILTIN_CLOCK_BOOTTIME: time.clock_gettime_ns(time.CLOCK_BOOTTIME),
        pb.BUILTIN_CLOCK_MONOTONIC: time.clock_gettime_ns(time.CLOCK_MONOTONIC),
        pb.BUILTIN_CLOCK_REALTIME: time.time_ns(),
    }
