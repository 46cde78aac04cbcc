"""Build the fake CUPTI (libcupti.so.13), the fake application and the real injection library
linked against the fake, for tests on machines without a GPU."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from collector.inject_build import C_SHIM, BuildError, Cupti, build, find_cupti

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class FakeCupti:
    lib_dir: Path  # holds libcupti.so.13 (the fake)
    app: Path  # fake_app
    injection: Path  # libxpu_perf_cupti.so built against the fake
    app_py313: Path  # fake_app exporting Py_Version = 3.13 (a CPython the library cannot read)


def cupti_headers() -> tuple[Path, ...] | None:
    """Include dirs with cupti.h and cuda.h (the real headers; the fake implements them)."""
    try:
        return find_cupti().include_dirs
    except BuildError:
        return None


def build_fake(out: Path) -> FakeCupti:
    include = cupti_headers()
    cc = shutil.which("cc") or shutil.which("gcc")
    if include is None or cc is None:
        raise BuildError("CUPTI headers or a C compiler missing")
    incs = [f"-I{d}" for d in include]
    lib_dir = out / "fake_cupti"
    lib_dir.mkdir(parents=True, exist_ok=True)
    fake = lib_dir / "libcupti.so.13"
    subprocess.run(
        [
            cc,
            "-O1",
            "-g",
            "-fno-omit-frame-pointer",  # so eBPF launch stacks unwind through it
            "-fPIC",
            "-shared",
            "-std=gnu11",
            "-fvisibility=hidden",
            "-pthread",
            *incs,
            f"-I{C_SHIM}",
            str(HERE / "fake_cupti.c"),
            str(HERE / "fake_pm_sampling.c"),
            "-Wl,-soname,libcupti.so.13",
            "-o",
            str(fake),
            "-ldl",
        ],
        check=True,
    )
    (lib_dir / "libcupti.so").unlink(missing_ok=True)
    (lib_dir / "libcupti.so").symlink_to("libcupti.so.13")
    app = out / "fake_app"
    app_py313 = out / "fake_app_py313"
    for exe, extra in ((app, []), (app_py313, ["-DFAKE_PY_VERSION=0x030D00F0", "-rdynamic"])):
        subprocess.run(
            [
                cc,
                "-O1",
                "-g",
                "-fno-omit-frame-pointer",  # so eBPF launch stacks unwind through it
                "-pthread",
                *extra,
                *incs,
                str(HERE / "fake_app.c"),
                str(HERE / "fake_profiler_client.c"),
                "-o",
                str(exe),
                f"-L{lib_dir}",
                "-l:libcupti.so.13",
                f"-Wl,-rpath,{lib_dir}",
            ],
            check=True,
        )
    injection = build(Cupti(include, lib_dir, "fake"), out_dir=out / "inject", force=True)
    return FakeCupti(lib_dir, app, injection, app_py313)
