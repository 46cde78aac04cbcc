"""Build the native test programs (frame pointers on, so eBPF can unwind them).

python tests/native/build.py OUT_DIR     # or import build_all(out_dir)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
FLAGS = [
    "-O2",
    "-g",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
    "-fno-optimize-sibling-calls",
]
PROGRAMS = {
    "two_callers": ("gcc", "two_callers.c"),
    "two_callers_cpp": ("g++", "two_callers.cpp"),
    "launch_marker": ("gcc", "launch_marker.c"),
    "cpu_bound": ("gcc", "cpu_bound.c"),
}


def build_all(out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, (compiler, source) in PROGRAMS.items():
        exe = out_dir / name
        src = HERE / source
        if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
            subprocess.run([compiler, *FLAGS, "-o", str(exe), str(src)], check=True)
        built[name] = exe
    return built


if __name__ == "__main__":
    for name, path in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else "build/native")).items():
        print(name, path)
