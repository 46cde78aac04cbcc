"""A recording's sources read each library's ELF symbol tables once (SharedSymbols): the
launch stacks and the CPU samples name frames in the same libraries, and reading libtorch's
tables twice was a second of a short program's trace writing on the H200."""

from __future__ import annotations

import glob
from pathlib import Path

from collector.recording.kept_streams import CPU_STREAMS, GPU_STREAMS, KeptSource, kept_sources
from collector.recording.source import SharedSymbols
from collector.symbolize import Symbolizer

LIBC = glob.glob("/usr/lib/x86_64-linux-gnu/libc.so.6")[0]


def test_symbolizers_of_one_recording_share_the_tables() -> None:
    shared = SharedSymbols()
    first, second = shared.symbolizer(), shared.symbolizer()
    elf = first.elf(LIBC)
    assert elf is not None and second.elf(LIBC) is elf
    # Apart, each reads its own (what a source outside a recording gets).
    assert Symbolizer().elf(LIBC) is not elf


def test_a_kept_recordings_sources_share_the_tables(tmp_path: Path) -> None:
    for name in (GPU_STREAMS, CPU_STREAMS):
        (tmp_path / name).mkdir()
    sources = [s for s in kept_sources(tmp_path) if isinstance(s, KeptSource)]
    assert [s.name for s in sources] == [GPU_STREAMS, CPU_STREAMS]
    gpu, cpu = (s.symbols.symbolizer() for s in sources)
    assert gpu.elf(LIBC) is cpu.elf(LIBC)
