"""The few tables of an ELF file that symbolization reads: the load segments, the GNU build
id, and the function symbol tables (.symtab, .dynsym) with their string tables.

Read directly (the headers with struct, the symbols as one numpy array) rather than through
pyelftools, which builds every section object, hash tables included, on the first lookup
by name: on a recording of a short torch program that was most of `record`'s time after
the target ended (docs/benchmarks.md, "record's fixed cost").  pyelftools stays the
tests' reference reader (tests/test_elf_tables.py)."""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

_PT_LOAD = 1
_SHT_NOTE = 7
_NT_GNU_BUILD_ID = 3
_STT_FUNC = 2
_STT_GNU_IFUNC = 10
_SHN_UNDEF = 0
_MAX_SECTIONS = 1 << 16  # far above any real file's; a corrupt count is refused


@dataclass(frozen=True)
class Segment:
    offset: int
    vaddr: int
    filesz: int


@dataclass(frozen=True)
class _Section:
    name: int  # offset in the section-name string table
    kind: int
    offset: int
    size: int
    link: int
    align: int
    entsize: int


@dataclass
class FunctionColumns:
    """The defined functions of one symbol table, in file order."""

    addr: np.ndarray  # uint64
    size: np.ndarray  # uint64
    name: np.ndarray  # int64 offsets into `strings` of each name's first byte
    strings: mmap.mmap | bytes  # the whole file (mapped), names NUL-terminated in it

    def name_at(self, offset: int) -> bytes:
        end = self.strings.find(b"\0", offset)
        return self.strings[offset : end if end >= 0 else len(self.strings)]


class ElfTables:
    """One ELF file's headers, read once; its tables read on demand from the file mapped into
    memory (libtorch_cuda's symbol names alone are tens of MB, of which a recording names a
    few hundred: only the pages read are loaded)."""

    def __init__(self, f: BinaryIO) -> None:
        try:
            self._file: mmap.mmap | bytes = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (ValueError, OSError):  # an empty file, or one that cannot be mapped
            f.seek(0)
            self._file = f.read()
        ident = self._read(0, 16)
        if ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise ValueError("not an ELF file")
        self.is64 = ident[4] == 2
        self.order = "<" if ident[5] == 1 else ">"
        if self.is64:
            head = struct.unpack(self.order + "HHIQQQIHHHHHH", self._read(16, 48))
        else:
            head = struct.unpack(self.order + "HHIIIIIHHHHHH", self._read(16, 36))
        phoff, shoff = head[4], head[5]
        phentsize, phnum, shentsize, shnum, shstrndx = head[8:13]
        if shnum > _MAX_SECTIONS or phnum > _MAX_SECTIONS:
            raise ValueError("implausible header counts")
        self.segments = self._load_segments(phoff, phentsize, phnum)
        self._sections = self._section_headers(shoff, shentsize, shnum)
        names = self._sections[shstrndx] if shstrndx < len(self._sections) else None
        self._names = self._read(names.offset, names.size) if names else b""

    def _check(self, offset: int, size: int) -> None:
        if offset < 0 or size < 0 or offset + size > len(self._file):
            raise ValueError("truncated ELF file")

    def _read(self, offset: int, size: int) -> bytes:
        self._check(offset, size)
        return self._file[offset : offset + size]

    def _load_segments(self, phoff: int, entsize: int, count: int) -> list[Segment]:
        if not count:
            return []
        fmt = self.order + ("IIQQQQQQ" if self.is64 else "IIIIIIII")
        if entsize < struct.calcsize(fmt):
            raise ValueError("short program headers")
        table = self._read(phoff, entsize * count)
        out = []
        for i in range(count):
            row = struct.unpack_from(fmt, table, i * entsize)
            if row[0] != _PT_LOAD:
                continue
            if self.is64:  # type, flags, offset, vaddr, paddr, filesz, ...
                out.append(Segment(row[2], row[3], row[5]))
            else:  # type, offset, vaddr, paddr, filesz, ...
                out.append(Segment(row[1], row[2], row[4]))
        return out

    def _section_headers(self, shoff: int, entsize: int, count: int) -> list[_Section]:
        if not count or not shoff:
            return []
        fmt = self.order + ("IIQQQQIIQQ" if self.is64 else "IIIIIIIIII")
        if entsize < struct.calcsize(fmt):
            raise ValueError("short section headers")
        table = self._read(shoff, entsize * count)
        out = []
        for i in range(count):
            name, kind, _flags, _addr, offset, size, link, _info, align, ent = struct.unpack_from(
                fmt, table, i * entsize
            )
            out.append(_Section(name, kind, offset, size, link, align, ent))
        return out

    def _section_name(self, section: _Section) -> bytes:
        end = self._names.find(b"\0", section.name)
        return self._names[section.name : end if end >= 0 else None]

    def _data(self, section: _Section) -> bytes:
        return self._read(section.offset, section.size)

    def build_id(self) -> str:
        """The GNU build id in hex ('' where the file has none)."""
        for section in self._sections:
            if section.kind != _SHT_NOTE:
                continue
            notes = self._data(section)
            pad = 8 if section.align == 8 else 4  # .note.gnu.property is 8-aligned
            at = 0
            while at + 12 <= len(notes):
                namesz, descsz, kind = struct.unpack_from(self.order + "III", notes, at)
                name_at = at + 12
                desc_at = name_at + -(-namesz // pad) * pad
                end = desc_at + -(-descsz // pad) * pad
                if desc_at + descsz > len(notes):
                    break
                if kind == _NT_GNU_BUILD_ID and notes[name_at : name_at + namesz] == b"GNU\0":
                    return notes[desc_at : desc_at + descsz].hex()
                at = end
        return ""

    def functions(self, section_name: bytes) -> FunctionColumns | None:
        """The defined functions (and GNU ifuncs) of one symbol table, at non-zero
        addresses; None where the file has no such table."""
        found = [s for s in self._sections if self._section_name(s) == section_name]
        if not found or found[0].entsize == 0 or found[0].link >= len(self._sections):
            return None
        table = found[0]
        strings = self._sections[table.link]
        self._check(strings.offset, strings.size)
        self._check(table.offset, table.size)
        if self.is64:
            fields = [("name", "u4"), ("info", "u1"), ("other", "u1"), ("shndx", "u2")]
            fields += [("value", "u8"), ("size", "u8")]
        else:
            fields = [("name", "u4"), ("value", "u4"), ("size", "u4"), ("info", "u1")]
            fields += [("other", "u1"), ("shndx", "u2")]
        dtype = np.dtype([(n, self.order + t) for n, t in fields])
        symbols = np.frombuffer(
            self._file, dtype=dtype, count=table.size // dtype.itemsize, offset=table.offset
        )
        kind = symbols["info"] & 0xF
        keep = (kind == _STT_FUNC) | (kind == _STT_GNU_IFUNC)
        keep &= (symbols["shndx"] != _SHN_UNDEF) & (symbols["value"] != 0)
        kept = symbols[keep]
        name = kept["name"].astype(np.int64)
        if len(name) and int(name.max()) >= strings.size:
            raise ValueError("a symbol name past its string table")
        return FunctionColumns(
            kept["value"].astype(np.uint64),
            kept["size"].astype(np.uint64),
            name + strings.offset,
            self._file,
        )
