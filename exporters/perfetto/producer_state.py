"""What one producer's two ways of writing slices share: its current track-event sequence,
its sample sequences, its flow ids, and the encoded heads of its tracks' events.

The object path (object_path.py: slices as collector.model objects) and the columnar path
(batch_writer.py: a SliceBatch in columns) both encode onto this state, so a source may mix
them and a track's packets stay on one clock.
"""

from __future__ import annotations

from collections.abc import Callable

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.perfetto import wire
from exporters.perfetto.flows import FlowIds
from exporters.perfetto.launch_stacks import LaunchStackThread
from exporters.perfetto.sequences import Sequence
from exporters.perfetto.trace_state import TraceState

# LaneSet.last_starts, LaneSet.open_ends, LaneSet.place, lane track uuids: a track's lanes
# as the object path's hot loop reads them.
LaneEntry = tuple[list[int], list[list[int]], Callable[[int, int], int], list[int]]
_TYPE_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_TYPE_END = pb.TrackEvent.TYPE_SLICE_END


class ProducerState:
    """One source's (cupti, ebpf, kineto...) encoding state, on sequences of its own."""

    def __init__(self, trace: TraceState, name: str, seq_id: int, index: int) -> None:
        """`index`: how many producers the trace had before this one (flow ids are
        per producer)."""
        self.trace = trace
        self.name = name
        self._sample_seqs: dict[str, Sequence] = {}
        # Launch stacks: a sequence per calling thread (launch_stacks.py).
        self.launch_threads: dict[tuple[int, int], LaunchStackThread] = {}
        self.wait_threads: dict[tuple[int, int], LaunchStackThread] = {}  # wait stacks
        # Object path: slices begun but not ended: (end ts, -order, encoded END packet
        # minus its timestamp, its track's clock); order makes the inner of two slices
        # ending together end first.
        self.open_ends: list[tuple[int, int, bytes, list]] = []
        self.order = 0
        self.flows = FlowIds(index << 44)
        self.start_sequence(seq_id)
        # Object path: (device, stream) / (pid, tid) -> the track's LaneSet (its lists and
        # its place()) and the lanes' track uuids.
        self.stream_lanes: dict[tuple[int, int], LaneEntry] = {}
        self.thread_lanes: dict[tuple[int, int], LaneEntry] = {}

    def start_sequence(self, seq_id: int) -> None:
        """Track events go on sequence `seq_id` from now on (with caches of its own)."""
        old = getattr(self, "seq", None)
        if old is not None:
            old.retired = True  # its packets go into the next chunk, then it is dropped
        self.seq = Sequence(self.trace, seq_id)
        self.trace.chunks.track_sequences.append(self.seq)
        # The latest BEGIN written on the sequence: a window of slices mostly earlier
        # than this goes on a new sequence (see Producer.flush()).
        self.latest = 0
        # Per track uuid: the encoded head of its BEGIN events (type, uuid, and for a GPU
        # stream lane its device and stream annotations) and its END packet.
        self.begin_heads: dict[int, bytes] = {}
        self.end_packets: dict[int, bytes] = {}
        # Object path: (uuid, name, category, *arg keys, *arg values) -> the encoded
        # constant part of the BEGIN event: what most BEGINs are, since kernels repeat.
        self.begin_cache: dict[tuple[object, ...], bytes] = {}

    def begin_head_of(self, uuid: int, device: int | None, stream: int) -> bytes:
        """The start of every BEGIN on track `uuid`: type and track, and for a GPU stream
        lane (`device` not None) its device and stream, constant args of the lane."""
        head = wire.event_head(_TYPE_BEGIN, uuid)
        if device is not None:
            seq = self.seq
            head += seq.annotation("device", device) + seq.annotation("stream", stream)
        self.begin_heads[uuid] = head
        return head

    def end_packet(self, uuid: int) -> bytes:
        """An END packet without its timestamp (which goes last), with the clock id of
        its track (an END that cannot use the clock drops it, see object_path._late_end)."""
        event = wire.event_head(_TYPE_END, uuid)
        packet = (
            wire.len_field(wire.PACKET_TRACK_EVENT, event)
            + self.seq.head
            + self.seq.track_clocks[uuid][1]
        )
        self.end_packets[uuid] = packet
        return packet

    def sample_sequence(self, timebase: str) -> Sequence:
        """The sequence of this producer's samples of one timebase (CPU, launch stacks)."""
        seq = self._sample_seqs.get(timebase)
        if seq is None:
            seq = self._sample_seqs[timebase] = Sequence(
                self.trace, self.trace.next_seq_id(), timebase
            )
        return seq
