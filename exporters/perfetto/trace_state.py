"""What the parts of one trace's writer share: the chunk being assembled, the tracks, the
trace's clock domain, sequence ids and the counters that end up in the metadata.

The facade (writer.TraceWriter) makes one and hands it to every sequence and producer;
none of them needs the facade itself.
"""

from __future__ import annotations

from exporters.perfetto.chunks import ChunkBuffer
from exporters.perfetto.tracks import Tracks


class TraceState:
    def __init__(self, chunks: ChunkBuffer, clock_id: int, sample_frequency_hz: int) -> None:
        self.chunks = chunks
        # The domain of every timestamp written (a builtin clock id).
        self.clock_id = clock_id
        self.sample_frequency_hz = sample_frequency_hz
        # CLOCK_MONOTONIC minus the trace clock (from the writer's clock snapshot): launch
        # stacks are timed on CLOCK_MONOTONIC (see launch_stacks.py).
        self.monotonic_offset = 0
        self.counts: dict[str, int] = {
            "slices": 0,
            "cpu_samples": 0,
            "launch_stacks": 0,
            "wait_stacks": 0,
            "extra_lanes": 0,
        }
        self.min_ts: int | None = None
        self._seq_counter = 0
        # Sequence 1: track descriptors, the trace's clock snapshot, the metadata.
        self.descriptor_seq_id = self.next_seq_id()
        self.tracks = Tracks(chunks, self.descriptor_seq_id, self.counts)

    def next_seq_id(self) -> int:
        """A new trusted_packet_sequence_id."""
        self._seq_counter += 1
        return self._seq_counter

    def note_ts(self, ts: int) -> None:
        """`ts` was written: the metadata instant goes at the earliest one."""
        if self.min_ts is None or ts < self.min_ts:
            self.min_ts = ts
