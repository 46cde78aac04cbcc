"""The symbolizer on real ELF files (no root needed): maps → file offset → ELF address →
function, demangling, build-id caching, the module+0xoffset fallback, perf maps, kallsyms."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from collector.symbolize import (
    KERNEL_MODULE,
    PYTHON_MODULE,
    UNKNOWN_MODULE,
    KernelSymbols,
    Mapping,
    MapsSnapshot,
    Symbolizer,
    demangle,
    parse_maps,
)
from tests.native.build import build_all

BASE = 0x5555_5555_4000  # where the loader would put a PIE


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("native"))


def _symbol(path: Path, name: str) -> tuple[int, int]:
    with path.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        (sym,) = symtab.get_symbol_by_name(name)
        return sym["st_value"], sym["st_size"]


def _loaded(pid: int, path: Path, base: int = BASE) -> MapsSnapshot:
    """The maps the loader would create for `path`: one mapping per PT_LOAD, page aligned."""
    mappings = []
    with path.open("rb") as f:
        for seg in ELFFile(f).iter_segments():
            if seg["p_type"] != "PT_LOAD":
                continue
            start = base + (seg["p_vaddr"] & ~0xFFF)
            end = base + ((seg["p_vaddr"] + seg["p_memsz"] + 0xFFF) & ~0xFFF)
            offset = seg["p_offset"] & ~0xFFF
            mappings.append(Mapping(start, end, "r-xp", offset, 1234, str(path)))
    snapshot = MapsSnapshot(pid)
    snapshot.mappings = sorted(mappings, key=lambda m: m.start)
    snapshot._starts = [m.start for m in snapshot.mappings]
    return snapshot


def test_parse_maps_and_find() -> None:
    text = (
        "55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 131 /usr/bin/app\n"
        "55d0c0a01000-55d0c0a05000 r-xp 00001000 fd:01 131 /usr/bin/app\n"
        "7ffd1c000000-7ffd1c021000 rw-p 00000000 00:00 0 [stack]\n"
        "7f0000000000-7f0000001000 rw-p 00000000 00:00 0\n"
    )
    maps = parse_maps(text)
    assert [m.path for m in maps] == ["/usr/bin/app", "/usr/bin/app", "", "[stack]"]
    snapshot = MapsSnapshot(1)
    snapshot.mappings, snapshot._starts = maps, [m.start for m in maps]
    hit = snapshot.find(0x55D0C0A01234)
    assert hit is not None and hit.offset == 0x1000 and hit.file_backed
    assert snapshot.find(0x55D0C0A05000) is None
    assert snapshot.find(0x10) is None
    stack = snapshot.find(0x7FFD1C000010)
    assert stack is not None and not stack.file_backed


def test_pie_addresses_resolve_to_functions(programs: dict[str, Path]) -> None:
    exe = programs["two_callers"]
    heavy, heavy_size = _symbol(exe, "heavy_caller")
    burn, _ = _symbol(exe, "burn")
    symbolizer = Symbolizer()
    snapshot = _loaded(1, exe)
    # Leaf (exact ip), then return addresses: the one just past heavy_caller's last byte
    # still names heavy_caller because non-leaf frames are looked up at addr - 1.
    frames = symbolizer.user_frames(snapshot, [BASE + burn + 4, BASE + heavy + heavy_size])
    assert [f.function for f in frames] == ["burn", "heavy_caller"]
    assert frames[0].module == str(exe)
    assert frames[0].rel_pc == burn + 4
    assert len(frames[0].build_id) == 40
    assert symbolizer.unresolved_frames == 0


def test_cpp_names_are_demangled(programs: dict[str, Path]) -> None:
    exe = programs["two_callers_cpp"]
    with exe.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        mangled = [
            s for s in symtab.iter_symbols() if s.name.startswith("_ZN8xpu_test6WorkerILi3EE")
        ]
    (run,) = mangled
    frames = Symbolizer().user_frames(_loaded(1, exe), [BASE + run["st_value"] + 1])
    assert frames[0].function == "xpu_test::Worker<3>::run(unsigned long)"
    assert demangle("_ZN8xpu_test4spinEm") == "xpu_test::spin(unsigned long)"
    assert demangle("_ZN8xpu_test4spinEm.cold") == "xpu_test::spin(unsigned long).cold"
    assert demangle("plain_c_name") == "plain_c_name"
    assert demangle("_Znot_really") == "_Znot_really"


def test_stripped_binary_keeps_module_and_offset(programs: dict[str, Path], tmp_path: Path) -> None:
    exe = tmp_path / "stripped"
    shutil.copy(programs["two_callers"], exe)
    subprocess.run(["strip", "--strip-all", str(exe)], check=True)
    heavy, _ = _symbol(programs["two_callers"], "heavy_caller")
    symbolizer = Symbolizer()
    (frame,) = symbolizer.user_frames(_loaded(1, exe), [BASE + heavy + 2])
    assert frame.function == f"stripped+0x{heavy + 2:x}"
    assert frame.module == str(exe)
    assert symbolizer.unresolved_frames == 1


def test_symbol_tables_cached_per_build_id(programs: dict[str, Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy_of_two_callers"
    shutil.copy(programs["two_callers"], copy)
    symbolizer = Symbolizer()
    first, second = symbolizer.elf(str(programs["two_callers"])), symbolizer.elf(str(copy))
    assert first is not None and first is second


def test_unknown_and_perf_map_frames(tmp_path: Path) -> None:
    pid = 4_194_999  # above pid_max's default: no live process has it
    perf_map = Path(f"/tmp/perf-{pid}.map")
    perf_map.write_text("7f0000001000 100 py::train_step:/app/train.py\n7f0000002000 80 jit_stub\n")
    try:
        snapshot = MapsSnapshot(pid)
        anon = Mapping(0x7F0000000000, 0x7F0000010000, "r-xp", 0, 0, "")
        snapshot.mappings, snapshot._starts = [anon], [anon.start]
        frames = Symbolizer().user_frames(
            snapshot, [0x7F0000001010, 0x7F0000002011, 0x7F0000003000, 0x10]
        )
    finally:
        perf_map.unlink()
    assert (frames[0].function, frames[0].module) == ("py::train_step:/app/train.py", PYTHON_MODULE)
    assert frames[1].function == "jit_stub"
    assert frames[2].module == UNKNOWN_MODULE
    assert (frames[3].function, frames[3].module) == ("0x10", UNKNOWN_MODULE)


def test_kernel_symbols() -> None:
    kallsyms = KernelSymbols(
        "ffffffff81000000 T _stext\n"
        "ffffffff81001000 t do_syscall_64\n"
        "ffffffff81002000 D some_data\n"
        "ffffffffc0000000 t nv_ioctl\t[nvidia]\n"
    )
    assert kallsyms.frame(0xFFFFFFFF81001010).function == "do_syscall_64"
    assert kallsyms.frame(0xFFFFFFFF81001010).module == KERNEL_MODULE
    assert kallsyms.frame(0xFFFFFFFFC0000004).module == "[nvidia]"
    assert kallsyms.frame(0x1000).function == "0x1000"
