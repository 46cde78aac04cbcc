"""The chunk being assembled: encoded packets wait here until there are about
`chunk_bytes` of them, then go to the deflater together (compression.py).

A chunk is laid out for trace_processor and for deflate:
1. `parts`: descriptors, clock snapshots, each sequence's interned-data packet of the chunk
   (ahead of every packet that uses its entries), instants and samples, in emit order;
2. then, sequence by sequence, each track's packets together (a sequence keeps them in one
   list per track clock, see Sequence.track_clock), CPU tracks before GPU tracks, so that
   an API call's flow begins before a GPU op of the same time ends it, and deflate finds a
   track's previous packet (its best match) close by.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.perfetto import wire


class ChunkSequence(Protocol):
    """What the buffer needs of a sequence (sequences.Sequence) to lay out a chunk."""

    cpu_packets: list[list[bytes]]  # per track clock: its packets waiting for the chunk
    gpu_packets: list[list[bytes]]
    retired: bool  # no more packets: dropped after its last ones are in a chunk

    def close_chunk_interned(self) -> None:
        """Encode the sequence's interned-data packet of this chunk (already in `parts`)."""


class ChunkBuffer:
    """Packets of the chunk being assembled, and where the chunk goes when it is full."""

    def __init__(self, put: Callable[[bytes], None], chunk_bytes: int) -> None:
        self._put = put
        self.chunk_bytes = chunk_bytes
        # Packets in emit order (framed, or pieces of framed packets joined at the flush).
        self.parts: list[bytes | bytearray] = []
        # About how many bytes the chunk holds, its track lists included: the hot loops
        # add what they append and flush() when it reaches chunk_bytes.
        self.size = 0
        # Sequences with track packets in per-track lists, in the order of their creation.
        self.track_sequences: list[ChunkSequence] = []
        # Sequences with an interned-data packet in `parts` (see
        # Sequence.intern_into_chunk).
        self.interning_sequences: list[ChunkSequence] = []
        self.closed = False  # the file is closed: nothing more is written

    def emit(self, pkt: pb.TracePacket) -> None:
        """A rare packet, built as a upb message."""
        self.emit_bytes(wire.frame(pkt.SerializeToString()))

    def emit_bytes(self, framed: bytes) -> None:
        self.parts.append(framed)
        self.size += len(framed)
        if self.size >= self.chunk_bytes:
            self.flush()

    def flush(self) -> None:
        """Hand the chunk's packets to the deflater, laid out as the module doc says."""
        if self.closed:
            return
        chunk = self.parts
        for seq in self.interning_sequences:
            seq.close_chunk_interned()
        self.interning_sequences.clear()
        for seq in self.track_sequences:
            for packets in (*seq.cpu_packets, *seq.gpu_packets):
                chunk += packets
                packets.clear()
        if self.track_sequences[-1:] and any(seq.retired for seq in self.track_sequences):
            self.track_sequences = [seq for seq in self.track_sequences if not seq.retired]
        if chunk:
            self._put(b"".join(chunk))
        chunk.clear()
        self.size = 0
