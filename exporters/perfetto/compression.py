"""Compression: chunks of packets deflated into `compressed_packets` packets.

trace_processor inflates `compressed_packets` transparently, so a trace is a run of such
packets, each holding one chunk (about `chunk_bytes()` of packets).  The level and the chunk
size are a trade between the time `record` adds to a run and the size of the file.
"""

from __future__ import annotations

import queue
import threading
from typing import IO

import deflate

from exporters.perfetto import wire

# Uncompressed bytes per `compressed_packets` chunk.  Each track's packets of a chunk go
# in together (see Sequence.track_clock), so longer chunks deflate better, but they are
# slower to write (the chunk's pieces have left the CPU caches by the time they are joined
# and deflated): the longer ones only for levels above the default, where size comes first.
CHUNK_BYTES = 1 << 20
LARGE_CHUNK_BYTES = 1 << 22
# Deflate levels (libdeflate, 1..12; 0 writes the packets uncompressed).  The default,
# what `record` and `convert` write.  Higher levels make a converted trace a little
# smaller for many times the deflate CPU (docs/benchmarks.md):
# `convert --compression-level 10` where size comes first.
DEFAULT_COMPRESSION_LEVEL = 6
MAX_COMPRESSION_LEVEL = 12


def chunk_bytes(level: int) -> int:
    """The chunk size for deflate level `level` (see CHUNK_BYTES)."""
    return LARGE_CHUNK_BYTES if level > DEFAULT_COMPRESSION_LEVEL else CHUNK_BYTES


class Deflater:
    """Writes chunks of packets to the file, each deflated into one `compressed_packets`
    packet, on the caller's thread or on a thread of its own.  Chunks are written in the
    order they are given."""

    def __init__(self, file: IO[bytes], level: int, threaded: bool) -> None:
        self._file = file
        self._level = level
        self.bytes_written = 0
        self._error: BaseException | None = None
        self._queue: queue.Queue[tuple[int, bytes] | None] | None = None
        # Threaded: chunks deflated (by the thread, or at the end by both threads) wait
        # here by number until the ones before them are written.
        self._given = 0
        self._deflated: dict[int, bytes] = {}
        self._next = 0
        self._lock = threading.Lock()
        if threaded:
            self._queue = queue.Queue(maxsize=2)  # bounded: encoding waits for deflate
            self._thread = threading.Thread(target=self._run, name="xpu-perf-deflate")
            self._thread.daemon = True
            self._thread.start()

    def put(self, chunk: bytes) -> None:
        if self._queue is None:
            self._write(self._deflate(chunk))
            return
        if self._error is not None:
            raise self._error
        self._queue.put((self._given, chunk))
        self._given += 1

    def finish(self, raise_error: bool = True) -> None:
        """Wait until every chunk is in the file; re-raise a failure of the thread.  The
        chunks still queued are deflated by this thread too, beside the deflate thread:
        the caller has nothing else to do, and the last chunks' deflate is wall time
        after the parse."""
        if self._queue is not None:
            while raise_error:  # (an abort drops the file: nothing to help with)
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                assert item is not None
                self._deflate_numbered(*item)
            self._queue.put(None)
            self._thread.join()
            self._queue = None
        if self._error is not None and raise_error:
            raise self._error

    def _deflate(self, chunk: bytes) -> bytes:
        if self._level > 0:
            # libdeflate, not zlib: the same zlib stream (what trace_processor inflates),
            # faster at level 6 and smaller than zlib can make at its highest levels.
            # (It releases the GIL: the two threads deflate at once.)
            chunk = wire.frame(
                wire.len_field(wire.PACKET_COMPRESSED, deflate.zlib_compress(chunk, self._level))
            )
        return chunk

    def _write(self, chunk: bytes) -> None:
        self._file.write(chunk)
        self.bytes_written += len(chunk)

    def _deflate_numbered(self, number: int, chunk: bytes) -> None:
        """Deflate chunk `number`, then write every deflated chunk whose turn it is."""
        if self._error is not None:
            return
        try:
            deflated = self._deflate(chunk)
            with self._lock:
                self._deflated[number] = deflated
                while self._next in self._deflated:
                    self._write(self._deflated.pop(self._next))
                    self._next += 1
        except BaseException as exc:  # re-raised on the writer's thread
            self._error = exc

    def _run(self) -> None:
        assert self._queue is not None
        while (item := self._queue.get()) is not None:
            self._deflate_numbered(*item)
