"""Sequences and clocks: one trusted_packet_sequence_id with its interning state
(interning.py) and its incremental clocks.

Timestamps are deltas on sequence-scoped incremental clocks (ids 64..127, one per track,
each defined by a ClockSnapshot on the sequence): a slice costs two 1-3 byte deltas, its
track's gap and duration, instead of two 8-byte absolute times.  Deltas must not be
negative: a packet that would go back in time on its track carries an absolute timestamp
in the trace's clock (`timestamp_clock_id`), which leaves the incremental clock untouched.
Each track's packets also wait in a list of their own until the chunk is flushed
(chunks.py), so deflate finds the track's previous packet close by.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import wire
from exporters.perfetto.interning import InternedFields
from exporters.perfetto.trace_state import TraceState

# Sequence-scoped clock ids are 64..127; each sequence defines its own clock 64.
INCREMENTAL_CLOCK_ID = 64
# Sequence-scoped clocks are 64..127: one of its own for each of the first 62 tracks,
# then one shared by the other CPU tracks and one by the other GPU tracks.
OWN_CLOCKS = 62
SHARED_CLOCK = (126, 127)  # indexed by "is a GPU track"
# A track's clock: [last timestamp written with it, its encoded `timestamp_clock_id`
# field (b"" for the sequence default), the track's packets waiting for the next chunk,
# that list's extend(), the packet fields before a BEGIN's timestamp (sequence id and
# flags, clock id)].  A list, not an object: the hot loops read it for every packet.
TrackClock = list[Any]
# Perf timebase name of the CPU timer samples' sequences: SQL finds them by it (launch
# stacks are not perf samples: launch_stacks.py).
CPU_SAMPLE_TIMEBASE = "cpu-clock"
_SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_TS_SMALL = wire.TIMESTAMP_SMALL
_SMALL_LIMIT = len(_TS_SMALL)
_TS_TAG = wire.key(wire.PACKET_TIMESTAMP, wire.VARINT)
_varint = wire.varint


class Sequence(InternedFields):
    """One trusted_packet_sequence_id: its interning state, its incremental clocks, and the
    encoded forms of its interned ids (so a hot packet is mostly cached bytes).  Its first
    packets (cleared incremental state, defaults, the snapshot defining clock 64) are
    written when it is made; `timebase` makes it a sequence of perf samples, `thread`
    (pid, tid, reference time in CLOCK_MONOTONIC us) one thread's launch stacks."""

    def __init__(
        self,
        trace: TraceState,
        seq_id: int,
        timebase: str | None = None,
        thread: tuple[int, int, int] | None = None,
    ) -> None:
        super().__init__()
        self.trace = trace
        self.seq_id = seq_id
        # This chunk's interned-data packet of the sequence: its entries so far and its
        # place in the chunk's parts (see intern_into_chunk).
        self._chunk_interned: pb.InternedData | None = None
        self._chunk_interned_packet = bytearray()
        # Packet heads: the sequence id, with SEQ_NEEDS_INCREMENTAL_STATE for packets that
        # refer to interned data.
        self.head = wire.varint_field(wire.PACKET_SEQUENCE_ID, seq_id)
        self.head_needs = self.head + wire.varint_field(wire.PACKET_SEQUENCE_FLAGS, _SEQ_NEEDS)
        self.absolute_clock = wire.varint_field(wire.PACKET_TIMESTAMP_CLOCK_ID, trace.clock_id)
        # The incremental clock: the last timestamp written with it (the snapshot's 0).
        self.clock = 0
        # Track events: a clock and a packet list per track (see track_clock()); the
        # packet lists of CPU tracks go into a chunk before those of GPU tracks.
        self.track_clocks: dict[int, TrackClock] = {}
        self.cpu_packets: list[list[bytes]] = []
        self.gpu_packets: list[list[bytes]] = []
        self._own_clocks = 0
        self._shared_clocks: list[TrackClock | None] = [None, None]  # CPU, GPU
        self.retired = False  # the producer has moved on to a new sequence

        first = pb.TracePacket()
        first.trusted_packet_sequence_id = seq_id
        first.sequence_flags = _SEQ_CLEARED
        first.incremental_state_cleared = True
        first.first_packet_on_sequence = True
        defaults = first.trace_packet_defaults
        defaults.timestamp_clock_id = INCREMENTAL_CLOCK_ID
        if thread is not None:
            pid, tid, reference_us = thread
            first.thread_descriptor.pid = pid
            first.thread_descriptor.tid = tid
            first.thread_descriptor.reference_timestamp_us = reference_us
        if timebase is not None:
            defaults.perf_sample_defaults.timebase.name = timebase
            if trace.sample_frequency_hz:
                defaults.perf_sample_defaults.timebase.frequency = trace.sample_frequency_hz
        trace.chunks.emit(first)
        # Clock 64 of this sequence reads 0 when the trace clock reads 0; every timestamp
        # on it is a delta from the previous one.  All sequences use the same reference,
        # so these snapshots agree with each other and with the writer's own snapshot.
        snapshot = pb.TracePacket()
        snapshot.trusted_packet_sequence_id = seq_id
        clocks = snapshot.clock_snapshot.clocks
        clocks.add(clock_id=INCREMENTAL_CLOCK_ID, timestamp=0, is_incremental=True)
        clocks.add(clock_id=trace.clock_id, timestamp=0)
        trace.chunks.emit(snapshot)

    # -- timestamps ---------------------------------------------------------------------
    def timestamp(self, ts: int) -> bytes:
        """The `timestamp` field(s) for a packet at `ts`, advancing the incremental clock;
        a packet earlier than the clock gets an absolute timestamp instead."""
        delta = ts - self.clock
        if delta >= 0:
            self.clock = ts
            return _TS_SMALL[delta] if delta < _SMALL_LIMIT else _TS_TAG + _varint(delta)
        return self.absolute_timestamp(ts)

    def track_clock(self, uuid: int, gpu: bool) -> TrackClock:
        """The incremental clock of track `uuid` on this sequence and the packets waiting
        for the next chunk (see TrackClock).

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
        shared = self._shared_clocks[gpu]
        if used < OWN_CLOCKS or shared is None:
            clock_id = INCREMENTAL_CLOCK_ID + used if used < OWN_CLOCKS else SHARED_CLOCK[gpu]
            self._own_clocks += used < OWN_CLOCKS
            if clock_id == INCREMENTAL_CLOCK_ID:
                field = b""  # defined with the sequence
            else:
                field = wire.varint_field(wire.PACKET_TIMESTAMP_CLOCK_ID, clock_id)
                self._define_clock(clock_id)
            packets: list[bytes] = []
            (self.gpu_packets if gpu else self.cpu_packets).append(packets)
            cell = [0, field, packets, packets.extend, self.head_needs + field]
            if used >= OWN_CLOCKS:
                self._shared_clocks[gpu] = cell
        else:
            cell = shared
        self.track_clocks[uuid] = cell
        return cell

    def _define_clock(self, clock_id: int) -> None:
        """A ClockSnapshot defining sequence clock `clock_id` as incremental, 0 at the
        trace clock's 0 (like clock 64 at the sequence's start)."""
        snapshot = pb.TracePacket()
        snapshot.trusted_packet_sequence_id = self.seq_id
        clocks = snapshot.clock_snapshot.clocks
        clocks.add(clock_id=clock_id, timestamp=0, is_incremental=True)
        clocks.add(clock_id=self.trace.clock_id, timestamp=0)
        self.trace.chunks.emit(snapshot)

    def absolute_timestamp(self, ts: int) -> bytes:
        """`ts` in the trace's clock domain; leaves the incremental clock where it is."""
        return _TS_TAG + _varint(ts) + self.absolute_clock

    # -- interned data of a chunk -------------------------------------------------------
    def intern_into_chunk(self) -> int:
        """Add the entries interned since the last call to this sequence's interned-data
        packet of the current chunk (made here, in the chunk's parts, on the first call
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
            chunks = self.trace.chunks
            chunks.parts.append(self._chunk_interned_packet)
            chunks.interning_sequences.append(self)
            added = len(self.head_needs) + 8
        return added + self.take_fresh(data)

    def close_chunk_interned(self) -> None:
        """Encode the chunk's interned-data packet into its place in the buffer."""
        data = self._chunk_interned
        if data is not None:
            self._chunk_interned = None
            self._chunk_interned_packet[:] = wire.frame(
                wire.len_field(wire.PACKET_INTERNED_DATA, data.SerializeToString())
                + self.head_needs
            )

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
        """A framed TrackEvent packet (an INSTANT; BEGINs and ENDs come from
        batch_writer.py) with interned name, category and args.
        `timestamp` is the encoded field from timestamp()/absolute_timestamp()."""
        event = b"".join(
            (
                wire.event_head(kind, uuid),
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
