"""The injection library's CFI unwinder (cupti_inject/src/unwind.c) against glibc backtrace().

tests/native/unwind_check.c unwinds thousands of launch-like stacks that alternate between
call paths, diverge at the top, share outer frames at shifting depths and pass through frames
without frame pointers, so the previous-unwind memo is used and refused in every way; each
unwind must equal backtrace()'s frame for frame, with no extra frame past _start."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from collector.inject_build import CFLAGS, SOURCE_DIR

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "tests" / "native" / "unwind_check.c"
# The library's own code-generation flags, for an executable instead of a shared object.
EXE_FLAGS = [f for f in CFLAGS if f not in ("-shared", "-fPIC", "-fvisibility=hidden")]


@pytest.mark.parametrize("frame_pointers", ["-fno-omit-frame-pointer", "-fomit-frame-pointer"])
def test_unwinder_matches_backtrace(tmp_path: Path, frame_pointers: str) -> None:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is part of the set-up (scripts/setup.sh)"
    exe = tmp_path / "unwind_check"
    subprocess.run(
        [
            cc,
            *EXE_FLAGS,
            frame_pointers,
            f"-I{SOURCE_DIR}",
            "-o",
            str(exe),
            str(CHECK),
            str(SOURCE_DIR / "unwind.c"),
        ],
        check=True,
    )
    proc = subprocess.run([str(exe), "3000"], capture_output=True, text=True, timeout=60)
    m = re.fullmatch(r"unwinds (\d+) frames (\d+) mismatches (\d+)\n", proc.stdout)
    assert m, proc.stdout + proc.stderr
    unwinds, frames, mismatches = map(int, m.groups())
    assert (mismatches, proc.returncode) == (0, 0), proc.stdout
    # 3000 steps: one op each (linear 1 leaf, norm 2, gelu 1, in turn), then a nested norm (2).
    assert unwinds == 1000 * (1 + 2 + 1) + 3000 * 2
    assert frames > 8 * unwinds
