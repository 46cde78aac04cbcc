"""Reading a .perfetto-trace back as a stream of encoded TracePackets, without loading it.

A trace is a run of `Trace.packet` frames (tag 0x0A, length, packet); the writer puts its
packets into `compressed_packets` packets (a zlib stream of more frames), one per chunk of
about 1-4 MiB.  `packets()` yields every packet, compressed ones unpacked, holding one chunk
at a time; `scan_head()` reads only what merge needs to plan before it writes anything: the
trace's clock snapshot (first chunk) and its metadata instant (last chunk).
"""

from __future__ import annotations

import collections
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.perfetto import wire

_FRAME_TAG = 0x0A  # Trace.packet, length-delimited
# The writer's metadata instant (writer.METADATA_CATEGORY; not imported: the writer module
# pulls in the whole encoder).
METADATA_CATEGORY = "xpu_perf_metadata"
# Scalar values of a debug annotation, as the writer sets them.
ArgValue = bool | int | float | str
# Frames remembered from the end of a file while looking for the metadata instant: the
# writer puts it in its last chunk (one compressed frame); a trace written uncompressed has
# one frame per packet, and past this many the whole file is read instead.
_TAIL_FRAMES = 4096


class TraceFileError(Exception):
    """The file is not a readable Perfetto protobuf trace; one line for the user."""


@dataclass
class TraceHead:
    """What a trace says about itself, read without decoding its events."""

    # The first clock snapshot of builtin clocks only (the trace's own; sequence-scoped
    # snapshots define incremental clocks): clock id -> reading.  Empty where none.
    clock_snapshot: dict[int, int] = field(default_factory=dict)
    primary_clock: int = pb.BUILTIN_CLOCK_BOOTTIME
    # The top-level xpu-perf metadata instant's args ({} where none), its time and clock.
    metadata: dict[str, ArgValue] = field(default_factory=dict)
    metadata_ts: int | None = None
    metadata_clock: int | None = None
    size: int = 0


def _frames_in(data: bytes) -> Iterator[bytes]:
    """The packets framed in `data` (a chunk's content): tag 0x0A, length, packet."""
    pos, end = 0, len(data)
    view = memoryview(data)
    while pos < end:
        if data[pos] != _FRAME_TAG:
            raise TraceFileError(f"bad packet framing inside a compressed chunk at byte {pos}")
        try:
            length, pos = wire.read_varint(data, pos + 1)
        except IndexError:
            raise TraceFileError("a compressed chunk ends inside a packet header") from None
        if pos + length > end:
            raise TraceFileError("a compressed chunk ends inside a packet")
        yield bytes(view[pos : pos + length])
        pos += length


def _compressed_payload(packet: bytes) -> bytes | None:
    """The zlib stream of a `compressed_packets` packet, or None for any other packet.
    Fields beside it (a tracing service adds its own) are ignored, as trace_processor does."""
    pos, end = 0, len(packet)
    while pos < end:
        tag, pos = wire.read_varint(packet, pos)
        kind = tag & 7
        if kind == wire.VARINT:
            _, pos = wire.read_varint(packet, pos)
        elif kind == wire.FIXED64:
            pos += 8
        elif kind == 5:  # fixed32
            pos += 4
        elif kind == wire.LEN:
            length, pos = wire.read_varint(packet, pos)
            if tag >> 3 == wire.PACKET_COMPRESSED:
                return packet[pos : pos + length]
            pos += length
        else:
            return None  # groups: not a packet the writer makes; passed through as it is
    return None


def _inflate(payload: bytes, path: Path) -> bytes:
    try:
        return zlib.decompress(payload)
    except zlib.error as exc:
        raise TraceFileError(f"{path}: a compressed chunk does not inflate ({exc})") from None


class _FrameFile:
    """The top-level frames of a trace file, walked by their lengths (no decoding)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._file = open(path, "rb")  # noqa: SIM115 (closed by close())
            self.size = os.fstat(self._file.fileno()).st_size
        except OSError as exc:
            raise TraceFileError(f"cannot read {path}: {exc.strerror}") from None
        if self.size == 0:
            self._file.close()
            raise TraceFileError(f"{path} is empty")

    def close(self) -> None:
        self._file.close()

    def offsets(self) -> Iterator[tuple[int, int]]:
        """(payload offset, payload length) of every frame; errors for a file that is not
        framed as a trace or ends inside a frame."""
        pos, size, f = 0, self.size, self._file
        while pos < size:
            f.seek(pos)
            head = f.read(11)
            if head[0] != _FRAME_TAG:
                raise TraceFileError(
                    f"{self.path} is not a Perfetto protobuf trace (bad packet framing at byte "
                    f"{pos})"
                )
            try:
                length, used = wire.read_varint(head, 1)
            except IndexError:
                raise TraceFileError(f"{self.path} is truncated at byte {pos}") from None
            start = pos + used
            if start + length > size:
                raise TraceFileError(
                    f"{self.path} is truncated: its last packet needs {start + length - size} "
                    "more bytes (was the recording interrupted?)"
                )
            yield start, length
            pos = start + length

    def read(self, offset: int, length: int) -> bytes:
        self._file.seek(offset)
        return self._file.read(length)


def packets(path: str | os.PathLike[str]) -> Iterator[bytes]:
    """Every TracePacket of the trace in file order, encoded; `compressed_packets` are
    unpacked (the wrapper itself is not yielded).  One chunk in memory at a time."""
    frames = _FrameFile(Path(path))
    try:
        for offset, length in frames.offsets():
            packet = frames.read(offset, length)
            payload = _compressed_payload(packet)
            if payload is None:
                yield packet
            else:
                yield from _frames_in(_inflate(payload, frames.path))
    finally:
        frames.close()


def _chunk_packets(frames: _FrameFile, offset: int, length: int) -> list[bytes]:
    packet = frames.read(offset, length)
    payload = _compressed_payload(packet)
    return [packet] if payload is None else list(_frames_in(_inflate(payload, frames.path)))


def _metadata_of(packet: pb.TracePacket) -> dict[str, ArgValue] | None:
    """The args of an xpu-perf metadata instant with its keys as written (only the
    top-level one has `tool`: a merged trace keeps its inputs' under `inputN.` keys)."""
    if not packet.HasField("track_event"):
        return None
    event = packet.track_event
    if METADATA_CATEGORY not in event.categories:
        return None
    args: dict[str, ArgValue] = {}
    for annotation in event.debug_annotations:
        kind = annotation.WhichOneof("value")
        if kind is not None and annotation.name:
            args[annotation.name] = getattr(annotation, kind)
    return args if "tool" in args else None


def _snapshot_of(packet: pb.TracePacket) -> dict[int, int] | None:
    """A clock snapshot of builtin clocks only: the trace's own (sequence-scoped ones
    define a sequence's incremental clocks, ids 64..127)."""
    if not packet.HasField("clock_snapshot"):
        return None
    clocks = packet.clock_snapshot.clocks
    if any(c.clock_id >= 64 for c in clocks):
        return None
    return {c.clock_id: c.timestamp for c in clocks}


def scan_head(path: str | os.PathLike[str]) -> TraceHead:
    """The clock snapshot and the metadata of a trace, checking its framing end to end:
    reads the first chunk and the last ones, not the events in between."""
    frames = _FrameFile(Path(path))
    head = TraceHead(size=frames.size)
    tail: collections.deque[tuple[int, int]] = collections.deque(maxlen=_TAIL_FRAMES)
    try:
        for index, (offset, length) in enumerate(frames.offsets()):
            tail.append((offset, length))
            if index < 4 and not head.clock_snapshot:
                # The writer's snapshot is its first packet; look a little further for
                # traces of other producers.
                for raw in _chunk_packets(frames, offset, length):
                    snapshot = _snapshot_of(pb.TracePacket.FromString(raw))
                    if snapshot:
                        head.clock_snapshot = snapshot
                        primary = pb.TracePacket.FromString(raw).clock_snapshot
                        if primary.HasField("primary_trace_clock"):
                            head.primary_clock = primary.primary_trace_clock
                        break
        found = _find_metadata(frames, reversed(tail), head)
        if not found and len(tail) == tail.maxlen:
            _find_metadata(frames, frames.offsets(), head)
    except TraceFileError:
        raise
    except Exception as exc:  # a packet upb cannot parse: not a trace this tool can merge
        raise TraceFileError(f"{path}: cannot decode a packet ({exc})") from None
    finally:
        frames.close()
    return head


def _find_metadata(frames: _FrameFile, where: Iterator[tuple[int, int]], head: TraceHead) -> bool:
    for offset, length in where:
        for raw in reversed(_chunk_packets(frames, offset, length)):
            packet = pb.TracePacket.FromString(raw)
            args = _metadata_of(packet)
            if args is not None:
                head.metadata = args
                if packet.HasField("timestamp"):
                    head.metadata_ts = packet.timestamp
                    head.metadata_clock = (
                        packet.timestamp_clock_id
                        if packet.HasField("timestamp_clock_id")
                        else head.primary_clock
                    )
                return True
    return False
