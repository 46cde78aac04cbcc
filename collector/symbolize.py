"""Turn raw instruction addresses from eBPF stacks into `Frame`s.

User addresses go through a snapshot of the process's memory maps, taken while the process
lived: address → mapping → file offset → ELF virtual address (PIE or not, the PT_LOAD segment
holding that offset decides) → function from `.symtab`, else `.dynsym`, demangled with
cxxfilt.  Per-file symbol tables are cached by build id, so a library that many processes map
is read once.  What cannot be named keeps `module+0xoffset`, so nothing is ever dropped.
Anonymous (JIT) code is named from `/tmp/perf-PID.map` when the process wrote one (CPython
3.12+ with `-X perf`, Node, the JVM with perf-map-agent).  The map is read as root from a
directory anyone can write, so (see read_perf_map): no symlink is followed, only a regular
file is read, at most PERF_MAP_MAX_BYTES of it, and only when the target's uid or root owns
it.  Kernel addresses use /proc/kallsyms.

The ELF tables are read by collector/elf_tables.py (headers with struct, the symbols as one
numpy array), and names are decoded only for the symbols that samples hit.
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
import os
import stat
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import cxxfilt

from collector.model import Frame

if TYPE_CHECKING:
    import numpy as np

    from collector.elf_tables import FunctionColumns, Segment

KERNEL_MODULE = "[kernel]"
UNKNOWN_MODULE = "[unknown]"
PERF_MAP_MODULE = "[perf-map]"
PYTHON_MODULE = "[python]"
PERF_MAP_MAX_BYTES = 64 << 20  # a JIT's map is a few MB; beyond this the rest is skipped


# --- process memory maps -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mapping:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    perms: str
    offset: int
    inode: int
    path: str

    @property
    def file_backed(self) -> bool:
        return self.inode != 0 and self.path.startswith("/")


def parse_maps(text: str) -> list[Mapping]:
    mappings = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        lo, hi = parts[0].split("-")
        path = parts[5].strip() if len(parts) > 5 else ""
        mappings.append(
            Mapping(int(lo, 16), int(hi, 16), parts[1], int(parts[2], 16), int(parts[4]), path)
        )
    mappings.sort(key=lambda m: m.start)
    return mappings


@dataclass(slots=True)
class MapsSnapshot:
    """The memory maps of one process image (one exec), grown as new mappings are seen.

    Mappings are only added, never removed: a sample taken before a dlclose() still resolves,
    and a later re-read after a miss (dlopen) extends what is known.
    """

    pid: int
    mappings: list[Mapping] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)
    uid: int | None = None  # the process's (effective) uid, while it lived
    _last_text: str = ""  # the maps as last read: an unchanged re-read is not parsed again

    @classmethod
    def read(cls, pid: int) -> MapsSnapshot:
        snapshot = cls(pid)
        snapshot.refresh()
        return snapshot

    def refresh(self) -> bool:
        """Re-read /proc/PID/maps; False when the process is gone."""
        try:
            text = Path(f"/proc/{self.pid}/maps").read_text()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            return False
        if not text:
            return False  # a zombie: its address space is already gone
        if self.uid is None:
            with contextlib.suppress(OSError):
                self.uid = os.stat(f"/proc/{self.pid}").st_uid
        if text == self._last_text:
            return True  # the periodic re-reads of a live process (bcc_uprobes) mostly are
        self._last_text = text
        known = {(m.start, m.end, m.path) for m in self.mappings}
        fresh = [m for m in parse_maps(text) if (m.start, m.end, m.path) not in known]
        if fresh:
            self.mappings = sorted(self.mappings + fresh, key=lambda m: m.start)
            self._starts = [m.start for m in self.mappings]
        return True

    def find(self, addr: int) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        # Re-reads after a remap can leave overlapping entries: look a few mappings back.
        for m in reversed(self.mappings[max(i - 7, 0) : i + 1]):
            if m.start <= addr < m.end:
                return m
        return None

    def covers(self, addrs: Iterable[int]) -> bool:
        return all(self.find(a) is not None for a in addrs)


# --- ELF symbol tables ---------------------------------------------------------------------


class ElfSymbols:
    """Function symbols and load segments of one ELF file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.build_id = ""
        self._segments: list[Segment] = []
        self._addrs: list[int] = []  # a list: bisect on it is the fastest lookup of one
        # Per symbol, its size and where its name is: numpy columns, read only for the
        # symbols a stack hits (a million Python ints or tuples would cost more than the read).
        self._sizes: np.ndarray | None = None
        self._name_strtabs: np.ndarray | None = None  # which string table
        self._name_offsets: np.ndarray | None = None  # offset of the name in it
        self._strtabs: list[mmap.mmap | bytes] = []  # the file mapped, names NUL-ended
        self._names: dict[int, str] = {}
        # numpy comes with it: not loaded before record has started its target.
        from collector.elf_tables import ElfTables

        with open(path, "rb") as f:
            elf = ElfTables(f)
            self._segments = elf.segments
            self.build_id = elf.build_id()
            # .symtab first (it has the static functions too), then .dynsym fills gaps.
            found = [elf.functions(name) for name in (b".symtab", b".dynsym")]
        self._keep_one_per_address([f for f in found if f is not None])

    def _keep_one_per_address(self, found: list[FunctionColumns]) -> None:
        """Per address, the first symbol (.symtab before .dynsym, then file order) that has
        a size, else the first one: the size bounds the function, a sizeless alias does not."""
        if not found:
            return
        import numpy as np

        self._strtabs = [f.strings for f in found]
        addr = np.concatenate([f.addr for f in found])
        size = np.concatenate([f.size for f in found])
        name = np.concatenate([f.name for f in found])
        strtab = np.concatenate([np.full(len(f.addr), i) for i, f in enumerate(found)])
        order = np.arange(len(addr))
        pick = np.lexsort((order, size == 0, addr))  # by address, sized first, file order
        addr, size, strtab, name = addr[pick], size[pick], strtab[pick], name[pick]
        first = np.ones(len(addr), dtype=bool)
        first[1:] = addr[1:] != addr[:-1]
        self._addrs = addr[first].tolist()
        self._sizes = size[first]
        self._name_strtabs = strtab[first]
        self._name_offsets = name[first]

    def file_offset_to_vaddr(self, file_offset: int) -> int | None:
        for seg in self._segments:
            if seg.offset <= file_offset < seg.offset + max(seg.filesz, 1):
                return file_offset - seg.offset + seg.vaddr
        return None

    def function_at(self, vaddr: int) -> str | None:
        i = bisect.bisect_right(self._addrs, vaddr) - 1
        if i < 0 or self._sizes is None:
            return None
        size = int(self._sizes[i])
        if size and vaddr >= self._addrs[i] + size:
            return None
        name = self._names.get(i)
        if name is None:
            assert self._name_strtabs is not None and self._name_offsets is not None
            offset = int(self._name_offsets[i])
            strtab = self._strtabs[int(self._name_strtabs[i])]
            end = strtab.find(b"\0", offset)
            name = demangle(strtab[offset : end if end >= 0 else None].decode("utf-8", "replace"))
            self._names[i] = name
        return name


def demangle(name: str) -> str:
    if not name.startswith("_Z"):
        return name
    base, dot, suffix = name.partition(".")  # clones: _Z3fooi.cold, .isra.0
    try:
        return cxxfilt.demangle(base) + (dot + suffix if dot else "")
    except cxxfilt.InvalidName:
        return name


# --- JIT perf maps and kernel symbols -------------------------------------------------------


class PerfMap:
    """/tmp/perf-PID.map: `START SIZE name` per line, hex addresses."""

    def __init__(self, text: str) -> None:
        rows = []
        for line in text.splitlines():
            parts = line.split(" ", 2)
            if len(parts) == 3:
                try:
                    rows.append((int(parts[0], 16), int(parts[1], 16), parts[2].strip()))
                except ValueError:
                    continue
        rows.sort()
        self._starts = [r[0] for r in rows]
        self._rows = rows

    def lookup(self, addr: int) -> str | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            start, size, name = self._rows[i]
            if addr < start + size:
                return name
        return None


def read_perf_map(path: Path, owners: Iterable[int]) -> tuple[PerfMap | None, str | None]:
    """The perf map at `path` and, when it is refused or cut, why (a counter name).

    /tmp is writable by anyone, and the reader is root: a symlink there could point at any
    file (O_NOFOLLOW), a FIFO would block and a device would never end (O_NONBLOCK on open,
    then only a regular file, checked on the open descriptor), a huge file would fill memory
    (only the first PERF_MAP_MAX_BYTES, up to the last whole line), and a map planted by
    another user would name frames (only `owners`: the target's uid, and root; perf's rule).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None, None
    except OSError:
        return None, "perf_maps_refused"  # ELOOP: a symlink; EACCES, ...
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in set(owners):
            return None, "perf_maps_refused"
        data = f.read(PERF_MAP_MAX_BYTES + 1)
    if len(data) <= PERF_MAP_MAX_BYTES:
        return PerfMap(data.decode(errors="replace")), None
    data = data[: data.rfind(b"\n", 0, PERF_MAP_MAX_BYTES) + 1]
    return PerfMap(data.decode(errors="replace")), "perf_maps_cut"


class KernelSymbols:
    """Text symbols from /proc/kallsyms (addresses are real only for root)."""

    def __init__(self, text: str) -> None:
        rows = []
        for line in text.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] in "tTwW":
                module = parts[3].strip("[]") if len(parts) > 3 else ""
                rows.append((int(parts[0], 16), parts[2], module))
        rows.sort()
        self._addrs = [r[0] for r in rows]
        self._rows = rows

    @classmethod
    def read(cls) -> KernelSymbols:
        try:
            return cls(Path("/proc/kallsyms").read_text())
        except OSError:
            return cls("")

    def frame(self, addr: int) -> Frame:
        i = bisect.bisect_right(self._addrs, addr) - 1
        if i < 0 or self._rows[i][0] == 0:
            return Frame(f"0x{addr:x}", KERNEL_MODULE, addr)
        _, name, module = self._rows[i]
        return Frame(name, f"[{module}]" if module else KERNEL_MODULE, addr)


# --- the symbolizer ------------------------------------------------------------------------


class ElfFiles:
    """The ELF files read so far, by file and by build id: one per recording, shared by its
    sources (the launch stacks and the CPU samples name frames in the same libraries, and
    libtorch's tables are the slowest part of writing a short program's trace)."""

    def __init__(self) -> None:
        self._by_file: dict[tuple[str, int, int, int], ElfSymbols | None] = {}
        self._by_build_id: dict[str, ElfSymbols] = {}

    def get(self, path: str) -> ElfSymbols | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (path, st.st_dev, st.st_ino, st.st_mtime_ns)
        if key not in self._by_file:
            try:
                symbols = ElfSymbols(path)
            except (OSError, ValueError, struct.error):
                self._by_file[key] = None
                return None
            if symbols.build_id:
                symbols = self._by_build_id.setdefault(symbols.build_id, symbols)
            self._by_file[key] = symbols
        return self._by_file[key]


class Symbolizer:
    """Addresses → frames, with ELF files cached per build id across processes (and across
    the sources given the same `elf_files`)."""

    def __init__(self, elf_files: ElfFiles | None = None) -> None:
        self._elf_files = elf_files if elf_files is not None else ElfFiles()
        self._perf_maps: dict[int, PerfMap | None] = {}
        self._kernel: KernelSymbols | None = None
        self.unresolved_frames = 0
        # perf maps refused (symlink, not a regular file, foreign owner) or cut at the cap
        self.perf_map_counts = {"perf_maps_refused": 0, "perf_maps_cut": 0}

    def elf(self, path: str) -> ElfSymbols | None:
        return self._elf_files.get(path)

    def perf_map(self, pid: int, uid: int | None = None) -> PerfMap | None:
        """The JIT map of `pid`, whose uid is `uid` (None: unknown, only root's map)."""
        if pid not in self._perf_maps:
            owners = {0} if uid is None else {0, uid}
            perf_map, problem = read_perf_map(Path(f"/tmp/perf-{pid}.map"), owners)
            if problem:
                self.perf_map_counts[problem] += 1
            self._perf_maps[pid] = perf_map
        return self._perf_maps[pid]

    def user_frames(self, maps: MapsSnapshot | None, addrs: Sequence[int]) -> list[Frame]:
        """Frames for a user stack given leaf first (as bpf_get_stack returns it).

        Every address but the first is a return address: it is looked up as `addr - 1`, so a
        call that is the last instruction of a function is named after that function.
        """
        frames = []
        for depth, addr in enumerate(addrs):
            frames.append(self._user_frame(maps, addr, addr - 1 if depth else addr))
        return frames

    def _user_frame(self, maps: MapsSnapshot | None, addr: int, lookup: int) -> Frame:
        mapping = maps.find(lookup) if maps is not None else None
        if mapping is None or not mapping.file_backed:
            name = None
            if maps is not None:
                perf_map = self.perf_map(maps.pid, maps.uid)
                name = perf_map.lookup(lookup) if perf_map else None
            if name is not None:
                module = PYTHON_MODULE if name.startswith("py::") else PERF_MAP_MODULE
                return Frame(name, module, addr)
            self.unresolved_frames += 1
            if mapping is not None and mapping.path:  # [vdso], [heap], ...
                return Frame(
                    f"{mapping.path}+0x{addr - mapping.start:x}", mapping.path, addr - mapping.start
                )
            return Frame(f"0x{addr:x}", UNKNOWN_MODULE, addr)
        file_offset = addr - mapping.start + mapping.offset
        elf = self.elf(mapping.path)
        vaddr = elf.file_offset_to_vaddr(file_offset) if elf else None
        if elf is None or vaddr is None:
            self.unresolved_frames += 1
            return Frame(
                f"{os.path.basename(mapping.path)}+0x{file_offset:x}", mapping.path, file_offset
            )
        name = elf.function_at(vaddr - (addr - lookup))
        if name is None:
            self.unresolved_frames += 1
            name = f"{os.path.basename(mapping.path)}+0x{vaddr:x}"
        return Frame(name, mapping.path, vaddr, elf.build_id)

    def load_kernel_symbols(self) -> None:
        """Read /proc/kallsyms now (record does it while the target runs, once kernel
        samples may come), not at the first kernel frame."""
        if self._kernel is None:
            self._kernel = KernelSymbols.read()

    def kernel_frames(self, addrs: Sequence[int]) -> list[Frame]:
        """Frames for a kernel stack given leaf first."""
        if not addrs:
            return []
        if self._kernel is None:
            self._kernel = KernelSymbols.read()
        return [self._kernel.frame(a) for a in addrs]
