"""collector/elf_tables.py against pyelftools, the reference reader, on real ELF files of this
machine (the interpreter, the C library, the libraries the tests build): the same load
segments, build id and defined functions; and a damaged file is a ValueError (the
symbolizer then keeps `module+0xoffset`), never a crash or a wrong table."""

from __future__ import annotations

import ctypes.util
import glob
import os
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection

from collector.elf_tables import ElfTables

_FUNC_KINDS = ("STT_FUNC", "STT_LOOS")  # pyelftools names STT_GNU_IFUNC (10) STT_LOOS


def real_elves() -> list[str]:
    found = [os.path.realpath(sys.executable)]
    libc = ctypes.util.find_library("c")
    for lib in (libc, "libm.so.6", "libstdc++.so.6"):
        if lib:
            found += glob.glob(f"/usr/lib/x86_64-linux-gnu/{lib}*")[:1]
    found += glob.glob(os.path.expanduser("~/.cache/xpu-perf/*/*/*.so"))[:3]
    return sorted({p for p in found if os.path.isfile(p)})


def reference(path: str) -> tuple[list[tuple[int, int, int]], str, dict[bytes, list]]:
    with open(path, "rb") as f:
        elf = ELFFile(f)
        segments = [
            (s["p_offset"], s["p_vaddr"], s["p_filesz"])
            for s in elf.iter_segments()
            if s["p_type"] == "PT_LOAD"
        ]
        build_id = ""
        for section in elf.iter_sections():
            if isinstance(section, NoteSection):
                for note in section.iter_notes():
                    # SystemTap's probe notes reuse the type number (3) under another owner.
                    if note["n_type"] == "NT_GNU_BUILD_ID" and note["n_name"] == "GNU":
                        build_id = build_id or str(note["n_desc"])
        tables: dict[bytes, list] = {}
        for name in (".symtab", ".dynsym"):
            table = elf.get_section_by_name(name)
            if table is None:
                continue
            tables[name.encode()] = [
                (s["st_value"], s["st_size"], s.name)
                for s in table.iter_symbols()
                if s["st_info"]["type"] in _FUNC_KINDS
                and s["st_shndx"] != "SHN_UNDEF"
                and s["st_value"] != 0
            ]
    return segments, build_id, tables


@pytest.mark.parametrize("path", real_elves())
def test_tables_equal_pyelftools(path: str) -> None:
    segments, build_id, tables = reference(path)
    with open(path, "rb") as f:
        elf = ElfTables(f)
        assert [(s.offset, s.vaddr, s.filesz) for s in elf.segments] == segments
        assert elf.build_id() == build_id
        for name in (b".symtab", b".dynsym"):
            got = elf.functions(name)
            if name not in tables:
                assert got is None
                continue
            assert got is not None
            names = [got.name_at(o).decode("utf-8", "replace") for o in got.name.tolist()]
            rows = list(zip(got.addr.tolist(), got.size.tolist(), names, strict=True))
            assert rows == tables[name]
            assert rows, f"{path}: {name!r} has no function"


def test_the_c_library_has_a_build_id_and_functions() -> None:
    """The comparison above is not vacuous: this machine's files have what it compares."""
    libc = glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6")
    with open(libc[0], "rb") as f:
        elf = ElfTables(f)
        assert len(elf.build_id()) == 40
        dynsym = elf.functions(b".dynsym")
    assert dynsym is not None and len(dynsym.addr) > 100


@pytest.mark.parametrize("cut", [0, 3, 20, 63, 200])
def test_a_truncated_file_is_refused(tmp_path: Path, cut: int) -> None:
    data = Path(os.path.realpath(sys.executable)).read_bytes()[:cut]
    path = tmp_path / "cut.so"
    path.write_bytes(data)
    with open(path, "rb") as f, pytest.raises(ValueError):
        elf = ElfTables(f)
        elf.functions(b".dynsym")


def test_a_file_that_is_no_elf_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "text.so"
    path.write_bytes(b"#!/bin/sh\necho not an ELF file\n" * 10)
    with open(path, "rb") as f, pytest.raises(ValueError, match="not an ELF"):
        ElfTables(f)


def test_section_headers_pointing_past_the_end_are_refused(tmp_path: Path) -> None:
    """A header whose tables lie past the end of the file (a file cut after its header)."""
    data = bytearray(Path(os.path.realpath(sys.executable)).read_bytes()[:4096])
    path = tmp_path / "short.so"
    path.write_bytes(data)
    with open(path, "rb") as f, pytest.raises(ValueError):
        elf = ElfTables(f)
        elf.functions(b".dynsym")
