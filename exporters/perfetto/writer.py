"""The one Perfetto encoder: collector.model events in, a native .perfetto-trace out.

TraceWriter is the facade the commands use:

    with TraceWriter(path, clock_id=...) as w:
        w.producer("cupti").write_all(events)
        w.set_metadata("key", value)

Streaming: every packet goes to disk as soon as it is encoded; only a bounded reorder
window of slices (to place overlapping slices on lanes in start order), the slices still
open, and the interning tables stay in memory.  The file is a temporary one created
exclusively beside OUT (collector/files.py: never a planted name) and renamed on a clean
close, so a failed run never leaves a half-written trace under the requested name.

Encoding contract (the SQL-facing part is in docs/ARCHITECTURE.md):
- process/thread tracks from ProcessDescriptor/ThreadDescriptor-carrying TrackDescriptors;
- `GPU D (<name>)` root tracks with one `Stream N` child track per stream (plus sibling
  lanes of the same name when ops overlap);
- slices as TrackEvent BEGIN/END pairs with interned names and categories, debug
  annotations, v2 flow ids;
- stacks as interned mappings -> frames -> callstacks; CPU timer samples are PerfSamples
  on sequences whose timebase is named `cpu-clock`; launch stacks are StreamingProfile
  samples on a sequence per calling thread plus an arg of the API slice
  (launch_stacks.py), so the UI's CPU flamegraph counts timer samples only;
- one ClockSnapshot, and an `xpu_perf_metadata` instant carrying the run's counters.

Where each part is (one concept a module, lower ones first; none imports a higher one):
- wire.py: protobuf wire-format pieces of the hand-built hot packets;
- compression.py: deflate levels, chunk sizes, the Deflater writing `compressed_packets`;
- chunks.py: the chunk being assembled and its layout (track packets grouped by track);
- tracks.py (+ lanes.py): track uuids and descriptors, lanes for overlapping slices;
- trace_state.py: what the parts of one writer share (chunk, tracks, clock, counters);
- interning.py: interning tables and the cached encoded fields that refer to them;
- sequences.py: a packet sequence, its incremental clocks (timestamps as deltas);
- producer_state.py: a producer's sequences, flow ids and cached event heads;
- point_events.py: instants and CPU samples -> packets;
- batch_writer.py (+ columnar.py): slices (a SliceBatch in columns) -> packets;
- producer.py: Producer, which routes a source's events to the above;
- writer.py (this module): TraceWriter, the file, the clock snapshot, the metadata.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from collector.files import OutputFile
from exporters.perfetto import compression, wire
from exporters.perfetto.chunks import ChunkBuffer
from exporters.perfetto.compression import (
    DEFAULT_COMPRESSION_LEVEL,
    MAX_COMPRESSION_LEVEL,
    Deflater,
)
from exporters.perfetto.producer import Producer
from exporters.perfetto.sequences import (
    CPU_SAMPLE_TIMEBASE,
    INCREMENTAL_CLOCK_ID,
)
from exporters.perfetto.trace_state import TraceState

# What code outside the package imports from here (commands, bench, tests).  Tunables
# are not re-exported: a test patches them where they are read (producer, compression).
__all__ = [
    "CPU_SAMPLE_TIMEBASE",
    "DEFAULT_COMPRESSION_LEVEL",
    "INCREMENTAL_CLOCK_ID",
    "MAX_COMPRESSION_LEVEL",
    "METADATA_CATEGORY",
    "TOOL_NAME",
    "Producer",
    "TraceWriter",
    "capture_clock_snapshot",
]

TOOL_NAME = "xpu-perf"
METADATA_CATEGORY = "xpu_perf_metadata"
_TYPE_INSTANT = pb.TrackEvent.TYPE_INSTANT


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
        self.path = Path(path)
        self._output = OutputFile(self.path)
        self.tmp_path = self._output.tmp_path
        # From here the file exists: whatever stops the set-up (a signal's exception
        # included: SIGTERM as the file appeared left it behind) takes it away.
        try:
            self._start(
                command_line, clock_id, clock_snapshot, sample_frequency_hz,
                compression_level, compress_in_thread,
            )  # fmt: skip
        except BaseException:
            self._output.discard()
            raise

    def _start(
        self,
        command_line: Iterable[str],
        clock_id: int,
        clock_snapshot: Mapping[int, int] | None,
        sample_frequency_hz: int,
        compression_level: int,
        compress_in_thread: bool,
    ) -> None:
        from collector import __version__

        self.clock_id = clock_id
        self.sample_frequency_hz = sample_frequency_hz
        self.compression_level = compression_level
        self.chunk_bytes = compression.chunk_bytes(compression_level)
        self._file: IO[bytes] | None = self._output.file
        self._deflater = Deflater(self._file, compression_level, compress_in_thread)
        try:
            self._chunks = ChunkBuffer(self._deflater.put, self.chunk_bytes)
            self._trace = TraceState(self._chunks, clock_id, sample_frequency_hz)
            self.descriptor_seq_id = self._trace.descriptor_seq_id
            self.counts = self._trace.counts
            self.tracks = self._trace.tracks
            self._metadata: dict[str, model.ArgValue] = {
                "tool": TOOL_NAME,
                "tool_version": __version__,
                "command_line": " ".join(command_line) or " ".join(sys.argv),
            }
            if sample_frequency_hz:
                self._metadata["cpu_sample_frequency_hz"] = sample_frequency_hz
            self._producers: list[Producer] = []
            self._tool_track: int | None = None  # the `xpu-perf` track of add_tool_slice
            self._tool_lanes: dict[str, int] = {}
            self._write_clock_snapshot(clock_snapshot)
        except BaseException:
            self._deflater.finish(raise_error=False)  # its thread, where it has one, ends
            raise

    # -- public API ---------------------------------------------------------------------
    def producer(self, name: str) -> Producer:
        prod = Producer(self._trace, name, self._trace.next_seq_id(), len(self._producers))
        self._producers.append(prod)
        return prod

    def set_metadata(self, key: str, value: model.ArgValue) -> None:
        self._metadata[key] = value

    def add_tool_slice(
        self, lane: str, ts: int, dur: int, name: str, category: str, args: model.Args
    ) -> None:
        """A slice on the `xpu-perf` track's child track `lane` (one per lane name, so the
        spans of different processes, which may overlap, never share a track)."""
        if self._tool_track is None:
            self._tool_track = self.tracks.named(TOOL_NAME)
        track = self._tool_lanes.get(lane)
        if track is None:
            track = self._tool_lanes[lane] = self.tracks.child(self._tool_track, lane)
        # Inline names on the descriptor sequence, as the metadata instant (rare packets).
        begin = pb.TracePacket(
            trusted_packet_sequence_id=self.descriptor_seq_id,
            timestamp=ts,
            timestamp_clock_id=self.clock_id,
        )
        event = begin.track_event
        event.type = pb.TrackEvent.TYPE_SLICE_BEGIN
        event.track_uuid = track
        event.name = name
        event.categories.append(category)
        for key, value in args.items():
            _set_annotation(event.debug_annotations.add(name=key), value)
        self._chunks.emit(begin)
        end = pb.TracePacket(
            trusted_packet_sequence_id=self.descriptor_seq_id,
            timestamp=ts + max(dur, 0),
            timestamp_clock_id=self.clock_id,
        )
        end.track_event.type = pb.TrackEvent.TYPE_SLICE_END
        end.track_event.track_uuid = track
        self._chunks.emit(end)

    def new_sequence_id(self) -> int:
        """A trusted_packet_sequence_id of its own for packets written by write_packet()
        (merge: each input sequence keeps its interning and clocks apart)."""
        return self._trace.next_seq_id()

    def write_packet(self, packet: bytes) -> None:
        """One already-encoded TracePacket, as it is (merge passes the packets of other
        xpu-perf traces through, their ids remapped); it goes into the file in call order."""
        self._chunks.emit_bytes(wire.frame(packet))

    def close(self) -> Path:
        """Flush everything, write the metadata, and move the file into place."""
        if self._file is None:
            return self.path
        try:
            self.tracks.finish()  # the processes' last names
            self._write_metadata()
            self._chunks.flush()
            self._deflater.finish()
            self._close_file()
        except BaseException:
            self.abort()  # a full disk, Ctrl-C: nothing half-written is left behind
            raise
        return self._output.commit()  # on failure it removes the file too

    def abort(self) -> None:
        """Drop the partial file: nothing half-written is left under any name."""
        if self._file is not None:
            self._deflater.finish(raise_error=False)
            self._close_file()
        self._output.discard()

    @property
    def bytes_written(self) -> int:
        return self._deflater.bytes_written

    @property
    def min_ts(self) -> int | None:
        """The earliest timestamp written so far."""
        return self._trace.min_ts

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- internals ----------------------------------------------------------------------
    def _close_file(self) -> None:
        assert self._file is not None
        file, self._file = self._file, None
        self._chunks.closed = True  # packets emitted from now on go nowhere
        try:
            file.close()
        except OSError:
            self._output.discard()  # the last flush failed (a full disk)
            raise

    def _write_clock_snapshot(self, snapshot: Mapping[int, int] | None) -> None:
        if snapshot is None:
            if self.clock_id != pb.BUILTIN_CLOCK_BOOTTIME:
                snapshot = capture_clock_snapshot()
            else:
                snapshot = {pb.BUILTIN_CLOCK_BOOTTIME: 0}
        # Launch stacks are timed on CLOCK_MONOTONIC, the only clock trace_processor reads
        # a StreamingProfilePacket's time in (launch_stacks.py): a snapshot without it
        # gets it as the trace clock's twin (nothing else in the trace uses it then).
        snapshot = dict(snapshot)
        snapshot.setdefault(pb.BUILTIN_CLOCK_MONOTONIC, snapshot.get(self.clock_id, 0))
        self._trace.monotonic_offset = snapshot[pb.BUILTIN_CLOCK_MONOTONIC] - snapshot.get(
            self.clock_id, 0
        )
        # The trace clock's reading at the snapshot: a time trace_processor can always
        # convert (see _first_ts_hint).
        self._snapshot_ts = snapshot.get(self.clock_id, 0)
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self.descriptor_seq_id
        pkt.clock_snapshot.primary_trace_clock = pb.BUILTIN_CLOCK_BOOTTIME
        for clock, reading in snapshot.items():
            pkt.clock_snapshot.clocks.add(clock_id=clock, timestamp=reading)
        self._chunks.emit(pkt)

    def _write_metadata(self) -> None:
        """One instant on an `xpu-perf` track whose args are the run's facts and counters."""
        for key, count in self.counts.items():
            self._metadata.setdefault(f"writer.{key}", count)
        uuid = self.tracks.named(TOOL_NAME) if self._tool_track is None else self._tool_track
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
        self._chunks.emit(pkt)

    def _first_ts_hint(self) -> int:
        # The metadata instant only needs a timestamp inside the trace's time range.  With
        # no event, not 0 but the snapshot's time: MONOTONIC 0 converts to a negative
        # BOOTTIME time where the two clocks are equal (no suspend) and BOOTTIME was read
        # first, and trace_processor drops negative times (and the metadata with them).
        return self.min_ts if self.min_ts is not None else self._snapshot_ts


def _set_annotation(annotation: pb.DebugAnnotation, value: model.ArgValue) -> None:
    """The value of a debug annotation, typed as InternedFields.annotation types it (ints
    out of int64 range as text)."""
    if isinstance(value, bool):
        annotation.bool_value = value
    elif isinstance(value, int) and wire.INT64_MIN <= value <= wire.INT64_MAX:
        annotation.int_value = value
    elif isinstance(value, float):
        annotation.double_value = value
    else:
        annotation.string_value = str(value)


def capture_clock_snapshot() -> dict[int, int]:
    """Readings of the clocks trace_processor can convert between, taken back to back."""
    return {
        pb.BUILTIN_CLOCK_BOOTTIME: time.clock_gettime_ns(time.CLOCK_BOOTTIME),
        pb.BUILTIN_CLOCK_MONOTONIC: time.clock_gettime_ns(time.CLOCK_MONOTONIC),
        pb.BUILTIN_CLOCK_REALTIME: time.time_ns(),
    }
