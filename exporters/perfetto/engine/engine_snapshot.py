"""New SQL on a looked-at trace without loading it: the embedded engine's heap, kept on disk.

The embedded trace_processor (`wasm_engine.py`) keeps everything a loaded trace is in its
wasm linear memory: the tables, the string pool, the allocator's and the RPC server's own
state.  What lives outside it (the stack pointer, at its base between calls, the stack's
bounds, the request buffer's address, the reply callback's slot in the function table) is
the same in every instance of the same module, and is checked.  So the heap right after a
load, put into a fresh instance, answers exactly like the loaded one: a look that needs the
engine (a statement the result store cannot answer) restores it in a fraction of a second
instead of loading the trace.

On a local file system the snapshot's pages are mapped over the heap, copy on write
(`_maps_safely`): nothing is copied up front, the checksum reads each page once from the
page cache, and the engine's writes go to private copies: far cheaper than copying a big
heap in.  Elsewhere (NFS, FUSE, cluster file systems, where another host may replace the
file under the mapping) the pages are read into it.

Taken right after the load, before the command's views and tables: a restored engine is
the same as a freshly loaded one, whatever the first command made (cached_trace.py runs the
statements asked so far again on it, as on a loaded one).

Never stale: a snapshot's name hashes the trace's key (`result_cache.trace_key`: identity
on disk plus a hash of the bytes), the engine build (the wasm's bytes and the wasmtime that
runs them) and this file's format; the file names it again inside.  A trace that changed
while it loaded keeps no snapshot (cached_trace.py takes the key again after the load).

Private and checked, like the result store: `$XDG_CACHE_HOME/xpu-perf/engine/` (0700), files
0600 written through `files.OutputFile` (a random exclusive name renamed into place).
Before one is read, the directories pass `cache_trust.untrusted_reason` and are not open to
others; the file is opened with O_NOFOLLOW and must be a regular file of this user, not
open to others, of the size its header says, and the restored heap must match the CRC-32
of the heap it was taken from (read through the mapping when mapped).  Anything else is
refused with one line on stderr and the trace is loaded.

Compact enough: all-zero 64 KiB pages are skipped; the rest is written raw, since deflate
added more to the first look and to the restore than it saved (docs/benchmarks.md, "Big
traces").  The directory holds at most `XPU_PERF_ENGINE_CACHE_MB` (default 4096; 0: no
snapshots), the least recently used go first; `--no-cache` / `XPU_PERF_NO_CACHE=1` bypass
it with the result store.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import struct
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING

from collector import cache_trust
from collector.files import OutputFile
from exporters.perfetto.engine import cache_settings

if TYPE_CHECKING:
    from exporters.perfetto.engine.trace_processor import Trace
    from exporters.perfetto.engine.wasm_engine import WasmTransport

ENV_CAP_MB = cache_settings.ENV_ENGINE_MB
DEFAULT_CAP_MB = cache_settings.DEFAULT_ENGINE_MB
FORMAT = 2
PAGE = 65536  # a wasm page: the heap grows by these, and zero ones are skipped
_MAGIC = b"XPUHEAP\0"
# magic, format, name, heap bytes, CRC-32 of the heap, runs, the state outside the heap
_HEAD = struct.Struct("<8sI40sQII5I")
_RUN = struct.Struct("<II")  # first page, pages
_CRC = struct.Struct("<I")
_ALIGN = 4096  # the pages start here in the file
# Each run lies in the file at an offset congruent to its place in the heap modulo 2 MiB
# (the heap starts 2 MiB aligned): mapped so, the kernel maps the page cache's large folios
# whole, and reading the heap through the mapping is faster.
_FOLIO_ALIGN = 2 * 1024**2
_PART = 32 * 1024**2  # what one reader or writer thread copies at a time
# A snapshot is not written where it would leave less than this free on the file system.
_KEEP_FREE = 1024**3
# A temporary file older than this is what a killed process left.
_STALE_TMP_S = 3600
_PRIVATE = stat.S_IRWXG | stat.S_IRWXO
# A trace that loads faster than this keeps no snapshot: restoring saves little there, and
# every small trace looked at (the test suite's, a few thousand slices) would keep a heap.
MIN_LOAD_S = 0.5


def snapshots_root() -> Path:
    return cache_trust.cache_root() / "xpu-perf" / "engine"


def cap_bytes() -> int:
    return cache_settings.engine_cap_bytes()


def snapshot_name(trace_key: str) -> str:
    """The trace's key and the embedded engine's build: a snapshot from another build is
    never restored."""
    from exporters.perfetto.engine.wasm_engine import engine_identity

    h = hashlib.blake2b(digest_size=20)
    for part in (f"engine snapshot {FORMAT}", trace_key, engine_identity()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _crc32(data: memoryview) -> int:
    import deflate  # libdeflate's CRC-32: ~30 GB/s here, zlib's ~2.6

    return int(deflate.crc32(data))


def _restored_crc32(heap: memoryview, runs: list[tuple[int, int]]) -> int:
    """The CRC-32 of a heap restored from `runs` (the rest zeros, as `clear_heap` left it):
    the runs' pages read where they are (mapped, each once from the page cache), the zero
    pages between them counted from a buffer of zeros instead of faulted in one 4 KiB
    page at a time."""
    import deflate

    crc = 0
    at = 0
    for first, pages in [*runs, (len(heap) // PAGE, 0)]:
        for _ in range(first - at):
            crc = deflate.crc32(_ZERO_PAGE, crc)
        at = first + pages
        crc = deflate.crc32(heap[first * PAGE : at * PAGE], crc)
    return int(crc)


_ZERO_PAGE = bytes(PAGE)


def _runs(heap: memoryview) -> list[tuple[int, int]]:
    """The heap's pages that are not all zeros, as (first page, pages) runs."""
    import numpy as np  # the pages tested at once, not in a Python loop

    words = np.frombuffer(heap, dtype=np.uint64).reshape(-1, PAGE // 8)
    runs: list[tuple[int, int]] = []
    for page in np.flatnonzero(words.any(axis=1)).tolist():
        if runs and sum(runs[-1]) == page:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((page, 1))
    return runs


def _data_offset(run_count: int) -> int:
    head = _HEAD.size + run_count * _RUN.size + _CRC.size
    return -(-head // _ALIGN) * _ALIGN


def _run_offsets(runs: list[tuple[int, int]]) -> tuple[list[int], int]:
    """Where each run's pages start in the file, and where the file ends: each run at the
    first offset past the previous one that is its heap offset modulo `_FOLIO_ALIGN` (the
    gaps are holes: written by seeking past them, they take no disk)."""
    offsets: list[int] = []
    at = _data_offset(len(runs))
    for first, pages in runs:
        at += (first * PAGE - at) % _FOLIO_ALIGN
        offsets.append(at)
        at += pages * PAGE
    return offsets, at


class Refused(Exception):
    """A snapshot that is there but must not be used; the message says why (one line)."""


class EngineSnapshots:
    """The snapshot of one trace's loaded engine: restore it, or keep one."""

    def __init__(self, trace_key: str, root: Path | None = None) -> None:
        self.root = root or snapshots_root()
        self.trace_key = trace_key
        self.enabled = cap_bytes() > 0
        self.restored = False  # for tests and the bench: did this look restore one?
        self._name: str | None = None

    @property
    def path(self) -> Path:
        if self._name is None:
            self._name = snapshot_name(self.trace_key)
        return self.root / f"{self._name}.heap"

    def _check_dirs(self) -> bool:
        """Whether the directory may be used; if not, say why and turn snapshots off."""
        if not self.enabled:
            return False
        try:
            reason = cache_trust.untrusted_reason(self.root, cache_trust.cache_root())
            if reason is None:
                with contextlib.suppress(FileNotFoundError):
                    mode = os.lstat(self.root).st_mode
                    if not stat.S_ISDIR(mode):
                        reason = f"{self.root} is not a directory"
                    elif mode & _PRIVATE:
                        reason = f"{self.root} is open to group or others (mode {mode & 0o777:o})"
        except OSError as exc:  # a directory on the way this user cannot search
            reason = f"{exc.filename}: {exc.strerror}"
        if reason is not None:
            self.enabled = False
            cache_trust.refuse("engine snapshots", reason, "loading the trace")
            return False
        return True

    # --- restore ------------------------------------------------------------------------
    def restore(self) -> Trace | None:
        """The trace's engine as it was right after its load, or None (no snapshot, or one
        refused: then one line says why)."""
        if not self._check_dirs():
            return None
        try:
            path = self.path
        except RuntimeError:
            return None  # no engine to name (WasmEngineError): the load says why
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except FileNotFoundError:
            return None
        except OSError as exc:  # a symlink (O_NOFOLLOW: ELOOP), not ours to read (EACCES)
            why = "is a symlink" if exc.errno == errno.ELOOP else exc.strerror
            cache_trust.refuse("engine snapshot", f"{self.path} {why}", "loading the trace")
            return None
        try:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        except OSError:
            regular = False
        if not regular:  # a directory (FileIO refuses it), a FIFO, a device
            os.close(fd)
            cache_trust.refuse(
                "engine snapshot", f"{path} is not a regular file", "loading the trace"
            )
            return None
        with os.fdopen(fd, "rb", buffering=0) as f:
            try:
                trace = self._read(f)
            except Refused as exc:
                cache_trust.refuse("engine snapshot", f"{self.path} {exc}", "loading the trace")
                return None
            except (OSError, ValueError) as exc:
                cache_trust.refuse("engine snapshot", f"{self.path}: {exc}", "loading the trace")
                return None
            if trace is not None:
                self.restored = True
                with contextlib.suppress(OSError):
                    os.utime(f.fileno())  # just used: the last the cap removes
            return trace

    def _read(self, f: io.FileIO) -> Trace | None:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused("is not a regular file")
        if st.st_uid != os.geteuid():
            raise Refused(f"is owned by uid {st.st_uid}")
        if st.st_mode & _PRIVATE:
            raise Refused(f"is open to group or others (mode {st.st_mode & 0o777:o})")
        head = f.read(_HEAD.size)
        if len(head) < _HEAD.size:
            raise Refused(f"is truncated ({st.st_size} bytes)")
        magic, fmt, name, heap_bytes, heap_crc, run_count, *outside = _HEAD.unpack(head)
        if magic != _MAGIC or fmt != FORMAT:
            raise Refused("is not an engine snapshot of this version")
        if name.decode("ascii", "replace") != self.path.stem:
            raise Refused("is not the snapshot of this trace")
        table = f.read(run_count * _RUN.size + _CRC.size)
        if len(table) < run_count * _RUN.size + _CRC.size:
            raise Refused(f"is truncated ({st.st_size} bytes)")
        (head_crc,) = _CRC.unpack_from(table, len(table) - _CRC.size)
        if _crc32(memoryview(head + table[: -_CRC.size])) != head_crc:
            raise Refused("has a damaged header")
        runs = [_RUN.unpack_from(table, i * _RUN.size) for i in range(run_count)]
        if any(a + n > b for (a, n), (b, _) in pairwise(runs)):
            raise Refused("has runs out of order")
        _, expected = _run_offsets(runs)
        if st.st_size != expected:
            raise Refused(f"is truncated or damaged ({st.st_size} bytes, {expected} expected)")
        if any((first + pages) * PAGE > heap_bytes for first, pages in runs):
            raise Refused("has pages outside its heap")
        outside_state = tuple(outside)
        if _maps_safely(f.fileno(), runs):
            try:
                return self._into_engine(f, heap_bytes, heap_crc, runs, outside_state, True)
            except _MapRefused:
                pass  # a kernel that will not map it here: read it instead
        return self._into_engine(f, heap_bytes, heap_crc, runs, outside_state, False)

    def _into_engine(
        self,
        f: io.FileIO,
        heap_bytes: int,
        heap_crc: int,
        runs: list[tuple[int, int]],
        outside: tuple[int, ...],
        mapped: bool,
    ) -> Trace | None:
        from exporters.perfetto.engine.trace_processor import Trace
        from exporters.perfetto.engine.wasm_backend import EmbeddedTraceProcessor
        from exporters.perfetto.engine.wasm_engine import WasmEngineError, heap_max_bytes

        if heap_bytes > heap_max_bytes():
            return None  # a smaller ceiling this run (XPU_PERF_ENGINE_HEAP_MB): load it
        try:
            tp = EmbeddedTraceProcessor()
        except WasmEngineError:
            return None  # the load says what is wrong with the engine
        try:
            transport: WasmTransport = tp.http.transport
            if transport.outside_state() != outside:
                raise Refused("was taken from an engine in another state")
            heap = transport.clear_heap(heap_bytes)
            if mapped:
                _map_pages(f.fileno(), heap, runs)
            else:
                _read_pages(f.fileno(), heap, runs)
            if _restored_crc32(heap, runs) != heap_crc:
                raise Refused("does not match its checksum (damaged)")
            del heap
        except BaseException:
            tp.close()
            raise
        return Trace(tp)

    # --- keep ---------------------------------------------------------------------------
    def save(self, trace: Trace, load_s: float) -> None:
        """Keep the engine's heap as it is now (right after a load that took `load_s`).
        Never fails the command: a full disk or a read-only home costs only the next look
        its speed, and leaves no file behind."""
        transport = trace.embedded_transport()
        if transport is None:
            return  # a native shell: nothing to keep
        if load_s < MIN_LOAD_S:
            return
        if not self._check_dirs():
            return
        with contextlib.suppress(OSError):
            if stat.S_ISDIR(os.lstat(self.path).st_mode):
                return  # no file renames over it: restore() said so, and loads each time
        heap = transport.heap_view()
        runs = _runs(heap)
        offsets, size = _run_offsets(runs)
        cap = cap_bytes()
        if size > cap:
            _note(f"{size / 1e6:.0f} MB, over the cap of {cap / 1e6:.0f} MB ({ENV_CAP_MB})")
            return
        try:
            cache_trust.make_private_dirs(self.root)
            free = os.statvfs(self.root)
            if free.f_bavail * free.f_frsize < size + _KEEP_FREE:
                _note(f"{size / 1e6:.0f} MB would leave under 1 GB free in {self.root}")
                return
            head = _HEAD.pack(
                _MAGIC,
                FORMAT,
                self.path.stem.encode("ascii"),
                len(heap),
                _crc32(heap),
                len(runs),
                *transport.outside_state(),
            )
            head += b"".join(_RUN.pack(first, pages) for first, pages in runs)
            head += _CRC.pack(_crc32(memoryview(head)))
            with OutputFile(self.path, "wb", file_mode=0o600) as out:
                out.file.write(head)
                for (first, pages), offset in zip(runs, offsets, strict=True):
                    out.file.seek(offset)
                    out.file.write(heap[first * PAGE : (first + pages) * PAGE])
        except OSError as exc:
            _note(exc.strerror or str(exc))
            return
        except (ValueError, struct.error) as exc:  # never the command's failure
            _note(str(exc))
            return
        finally:
            del heap
        prune(self.root, cap)


def _note(why: str) -> None:
    print(
        f"xpu-perf: engine snapshot not kept ({why}); the next look loads the trace",
        file=sys.stderr,
    )


def _parts(runs: list[tuple[int, int]]) -> Iterator[tuple[int, int, int]]:
    """(heap offset, file offset, bytes) of the runs, cut into `_PART` pieces."""
    offsets, _ = _run_offsets(runs)
    for (first, pages), at in zip(runs, offsets, strict=True):
        start, end = first * PAGE, (first + pages) * PAGE
        for part in range(start, end, _PART):
            size = min(_PART, end - part)
            yield part, at, size
            at += size


def _read_pages(fd: int, heap: memoryview, runs: list[tuple[int, int]]) -> None:
    """The snapshot's pages into the heap, a few parts at once: each reader faults its part
    in and copies into it, which the kernel does on several cores at once."""
    from exporters.perfetto.engine.wasm_engine import prefault

    def read(part: tuple[int, int, int]) -> None:
        at, offset, size = part
        into = heap[at : at + size]
        prefault(into)
        done = 0
        while done < size:
            n = os.preadv(fd, [into[done:]], offset + done)
            if not n:
                raise Refused("is truncated")
            done += n

    with ThreadPoolExecutor(_readers()) as pool:
        for _ in pool.map(read, _parts(runs)):
            pass


class _MapRefused(Exception):
    """The kernel would not map the snapshot over the heap (the instance is discarded)."""


# File systems whose files change only through this kernel: a snapshot there changes under
# a mapping only if this user (or root) truncates it by hand.  Elsewhere (NFS, FUSE, a
# cluster file system) another host can replace it, and a page read back after that would
# kill the process (SIGBUS): those are read.
_LOCAL_FILE_SYSTEMS = frozenset(
    {
        0xEF53,  # ext2/3/4
        0x58465342,  # xfs
        0x9123683E,  # btrfs
        0x01021994,  # tmpfs
        0xF2F52010,  # f2fs
        0x2FC12FC1,  # zfs
        0xCA451A4E,  # bcachefs
        0x794C7630,  # overlayfs (containers)
    }
)
# Each run is a mapping of its own; the kernel allows ~65k per process.
_MAX_MAPPED_RUNS = 4096


def _file_system_type(fd: int) -> int | None:
    import ctypes

    buf = ctypes.create_string_buffer(256)  # struct statfs: f_type is its first word
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.fstatfs(fd, buf) != 0:
        return None
    return ctypes.c_long.from_buffer(buf).value & 0xFFFFFFFF


def _maps_safely(fd: int, runs: list[tuple[int, int]]) -> bool:
    """Whether the snapshot is mapped over the heap rather than copied into it: on a local
    file system (above) and in few enough runs.  The file is this user's, 0600 in a 0700
    directory (checked before), and nothing of ours changes a snapshot in place: a new one
    is renamed over it and an old one unlinked, both of which leave a mapping its pages."""
    return len(runs) <= _MAX_MAPPED_RUNS and _file_system_type(fd) in _LOCAL_FILE_SYSTEMS


def _map_pages(fd: int, heap: memoryview, runs: list[tuple[int, int]]) -> None:
    """The snapshot's runs mapped over the heap, copy on write: no copy now, the pages come
    from the page cache as they are read (the checksum reads each once)."""
    from exporters.perfetto.engine.wasm_engine import map_private

    offsets, _ = _run_offsets(runs)
    for (first, pages), offset in zip(runs, offsets, strict=True):
        try:
            map_private(heap[first * PAGE : (first + pages) * PAGE], fd, offset)
        except OSError as exc:
            raise _MapRefused(str(exc)) from exc


def _readers() -> int:
    return max(1, min(4, os.cpu_count() or 1))


def _entries(root: Path) -> Iterator[tuple[int, int, str, str]]:
    """(mtime_ns, size, path, kind) of the regular files in the snapshot directory."""
    with os.scandir(root) as scan:
        for entry in scan:
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                continue
            if entry.name.endswith(".heap"):
                yield st.st_mtime_ns, st.st_size, entry.path, "heap"
            elif entry.name.startswith(".") and entry.name.endswith(".tmp"):
                yield st.st_mtime_ns, st.st_size, entry.path, "tmp"


def prune(root: Path, cap: int) -> None:
    """Remove the snapshots used longest ago until the rest fit in `cap` bytes, and what a
    killed writer left."""
    try:
        entries = sorted(_entries(root), reverse=True)
    except OSError:
        return
    total = 0
    stale = time.time_ns() - _STALE_TMP_S * 10**9
    for mtime_ns, size, path, kind in entries:
        if kind == "tmp":
            if mtime_ns < stale:
                with contextlib.suppress(OSError):
                    os.unlink(path)
            continue
        total += size
        if total > cap:
            with contextlib.suppress(OSError):
                os.unlink(path)
