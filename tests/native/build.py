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
# A stand-in libcudart (in its own directory, as libcudart.so.13) and a program linked to it.
FAKE_CUDART = "fake_cudart.c"
CUDART_LAUNCHER = "cudart_launcher.c"


def build_all(out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, (compiler, source) in PROGRAMS.items():
        exe = out_dir / name
        src = HERE / source
        if not exe.exists() or exe.stat().st_mtime < src.stat().st_mtime:
            subprocess.run([compiler, *FLAGS, "-o", str(exe), str(src)], check=True)
        built[name] = exe
    built["cudart_launcher"] = _build_cudart_launcher(out_dir)
    return built


def _stale(target: Path, *sources: Path) -> bool:
    return not target.exists() or any(target.stat().st_mtime < s.stat().st_mtime for s in sources)


def _build_cudart_launcher(out_dir: Path) -> Path:
    lib_dir = out_dir / "fake_cudart"
    lib_dir.mkdir(exist_ok=True)
    lib = lib_dir / "libcudart.so.13"
    if _stale(lib, HERE / FAKE_CUDART):
        subprocess.run(
            [
                "gcc",
                *FLAGS,
                "-fPIC",
                "-shared",
                "-Wl,-soname,libcudart.so.13",
                "-o",
                str(lib),
                str(HERE / FAKE_CUDART),
            ],
            check=True,
        )
    exe = out_dir / "cudart_launcher"
    if _stale(exe, HERE / CUDART_LAUNCHER, lib):
        subprocess.run(
            [
                "gcc",
                *FLAGS,
                "-o",
                str(exe),
                str(HERE / CUDART_LAUNCHER),
                str(lib),
                f"-Wl,-rpath,{lib_dir}",
            ],
            check=True,
        )
    return exe


if __name__ == "__main__":
    for name, path in build_all(Path(sys.argv[1] if len(sys.argv) > 1 else "build/native")).items():
        print(name, path)
