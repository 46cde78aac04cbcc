"""One producer's encoding state: its track-event sequence, its sample sequences, its flow
ids, and the encoded heads of its tracks' events, kept from one SliceBatch to the next
(batch_writer.py) so that a track's packets stay on one clock.
"""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.perfetto import wire
from exporters.perfetto.launch_stacks import LaunchStackThread
from exporters.perfetto.sequences import Sequence
from exporters.perfetto.trace_state import TraceState

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
        # The next flow id: each producer's ids lie in a range of their own (a flow's two
        # ends are paired by id in the whole trace).
        self.next_flow_id = (index << 44) + (1 << 40)
        self.start_sequence(seq_id)

    def start_sequence(self, seq_id: int) -> None:
        """Track events go on sequence `seq_id` from now on (with caches of its own)."""
        old = getattr(self, "seq", None)
        if old is not None:
            old.retired = True  # its packets go into the next chunk, then it is dropped
        self.seq = Sequence(self.trace, seq_id)
        self.trace.chunks.track_sequences.append(self.seq)
        # Per track uuid: the encoded head of its BEGIN events (type, uuid, and for a GPU
        # stream lane its device and stream annotations) and its END packet.
        self.begin_heads: dict[int, bytes] = {}
        self.end_packets: dict[int, bytes] = {}
        # (track uuid, name, category, *typed args) -> the encoded BEGIN head of a later
        # batch's slices (batch_writer._heads).
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
        its track (an END earlier than the clock drops it: batch_writer._write_slices)."""
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
