"""Build the CUPTI injection library (cupti_inject/) on demand, cached by CUPTI version.

The library must be compiled against the CUPTI headers of the libcupti the target will load
(activity record layouts change between CUPTI versions), so it is built on the machine that
runs the target, with the system C compiler, the first time `record` needs it.  The cache key
is the CUPTI version plus a hash of the sources, so editing the C code rebuilds too.

CUPTI is looked for in, in order: $XPU_PERF_CUPTI_HOME, $CUDA_HOME, the pip `nvidia-*` wheels of
the running Python (torch's CUDA 13 wheels: site-packages/nvidia/cu13), /usr/local/cuda*.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from collector import cache_trust

REPO = Path(__file__).resolve().parent.parent
SOURCE_DIR = REPO / "cupti_inject" / "src"
SCHEMA = REPO / "protos" / "cupti_stream.def"
# An empty <string>: CUDA 13's cupti_profiler_host.h includes that C++ header though it
# declares only C (cupti_inject/c_shim/string says more).  After the CUPTI headers.
C_SHIM = REPO / "cupti_inject" / "c_shim"
LIBRARY_NAME = "libxpu_perf_cupti.so"
SAMPLER_NAME = "libxpu_perf_sampler.so"
# The sources of each library, by name (tests/test_inject_build.py fails on a .c file in
# cupti_inject/src/ that is in none of these lists).  Shared by both libraries: the stream,
# the CFI unwinder, the Python frame reader, interned strings, the module map and the
# capture-window control page.
SHARED_SOURCES = (
    "modules.c",
    "pyframes.c",
    "stream.c",
    "strings.c",
    "unwind.c",
    "window_control.c",
)
# The CUPTI injection library (CUDA_INJECTION64_PATH), one file per concern, in a stack
# (docs/ARCHITECTURE.md, `cupti_inject/` under "Modules"): state.c the shared state at the
# bottom, inject.c the entry above all; tests/test_c_layers.py fails on a call cycle.
CUPTI_SOURCES = (
    "inject.c",
    "state.c",
    "kinds.c",
    "lifecycle.c",
    "config.c",
    "api_callbacks.c",
    "threads.c",
    "launch_stacks.c",
    "sync_ops.c",
    "activity.c",
    "nvtx.c",
    "nvtx_window.c",
    "windows.c",
    "counters.c",
    "program_profiler.c",
    "program_records.c",
    "pm_sampling.c",
    "pm_config.c",
    *SHARED_SOURCES,
)
# Measurement-only switches (experiments.h), built in only with experiments=True, which also
# defines XPU_PERF_EXPERIMENTS: the benchmarks' library, never `record`'s.
EXPERIMENT_SOURCES = ("experiments.c",)
EXPERIMENTS_DEFINE = "-DXPU_PERF_EXPERIMENTS"
# The CPU sampler is its own library (LD_PRELOAD into every process of the recorded tree,
# with or without CUDA): the stream, unwinder and Python reader without CUPTI.
# process_hooks.c: what the preloaded library interposes for the whole process (_exit, kill,
# raise, set*id): the final flush of both libraries, changes of user (process_hooks.h).
# cupti_interpose.c: the CUPTI entry points a program's own profiler calls, handed to the
# injection library (cupti_interpose.h).  waits.c: the blocking libc calls, timed; those that
# blocked past the threshold are recorded with their stack (waits.h).  stack_table.c: the
# stack deduplication both the samples and the waits use (stack_table.h).
SAMPLER_SOURCES = (
    "sampler.c",
    "waits.c",
    "stack_table.c",
    "process_hooks.c",
    "cupti_interpose.c",
    *SHARED_SOURCES,
)
CFLAGS = (
    "-O2",
    "-g",
    "-fPIC",
    "-shared",
    "-std=gnu11",
    "-fvisibility=hidden",
    "-fasynchronous-unwind-tables",
    # eBPF launch stacks (--launch-stacks ebpf) walk frame pointers up from the marker.
    "-fno-omit-frame-pointer",
    "-Wall",
    "-Wextra",
    "-Wno-unused-parameter",
    "-pthread",
)


class BuildError(Exception):
    """The library could not be built; the message says what is missing."""


@dataclass(frozen=True)
class Cupti:
    include_dirs: tuple[Path, ...]  # cupti.h and cuda.h
    lib_dir: Path  # libcupti.so*
    version: str  # CUPTI_API_VERSION


def _candidate_roots() -> list[Path]:
    roots: list[Path] = []
    for var in ("XPU_PERF_CUPTI_HOME", "CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    for site in {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *sys.path}:
        nvidia = Path(site) / "nvidia"
        if nvidia.is_dir():
            roots.extend(sorted(nvidia.iterdir(), reverse=True))
    local = Path("/usr/local")
    if local.is_dir():
        roots.append(local / "cuda")
        roots.extend(sorted(local.glob("cuda-*"), reverse=True))
    return roots


def _first(root: Path, rels: tuple[str, ...], name: str) -> Path | None:
    for rel in rels:
        d = root / rel
        if list(d.glob(name)):
            return d
    return None


def find_cupti() -> Cupti:
    """Locate CUPTI headers and library; raises BuildError listing where it looked."""
    tried = []
    for root in _candidate_roots():
        inc = _first(root, ("include", "extras/CUPTI/include", "cuda_cupti/include"), "cupti.h")
        lib = _first(root, ("lib64", "lib", "extras/CUPTI/lib64", "cuda_cupti/lib"), "libcupti.so*")
        tried.append(str(root))
        if inc is None or lib is None:
            continue
        cuda_h = inc if (inc / "cuda.h").exists() else None
        if cuda_h is None:
            for other in _candidate_roots():
                found = _first(other, ("include", "cuda_runtime/include"), "cuda.h")
                if found:
                    cuda_h = found
                    break
        if cuda_h is None:
            continue
        text = (inc / "cupti_version.h").read_text(errors="replace")
        m = re.search(r"#define\s+CUPTI_API_VERSION\s+(\d+)", text)
        version = m.group(1) if m else "unknown"
        dirs = (inc,) if cuda_h == inc else (inc, cuda_h)
        return Cupti(dirs, lib, version)
    raise BuildError(
        "CUPTI not found (set CUDA_HOME or XPU_PERF_CUPTI_HOME); looked in: " + ", ".join(tried)
    )


def _source_hash(extra: str) -> str:
    h = hashlib.sha256(extra.encode())
    for path in [*sorted(SOURCE_DIR.glob("*")), SCHEMA]:
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def _cache_base() -> Path:
    """The cache root whose directories down to the library must be trusted."""
    return Path(os.environ.get("XPU_PERF_CACHE") or cache_trust.cache_root())


def cache_dir() -> Path:
    if os.environ.get("XPU_PERF_CACHE"):
        return Path(os.environ["XPU_PERF_CACHE"]) / "cupti_inject"
    return cache_trust.cache_root() / "xpu-perf" / "cupti_inject"


def _link_name(lib_dir: Path) -> str:
    """-l argument: prefer the versioned soname the driver's CUPTI carries (libcupti.so.13)."""
    if (lib_dir / "libcupti.so").exists():
        return "-lcupti"
    versioned = sorted(lib_dir.glob("libcupti.so.*"))
    return f"-l:{versioned[0].name}"


def include_flags(cupti: Cupti) -> list[str]:
    """The compiler's include flags for the library's sources: CUPTI's, then the shim."""
    return [*(f"-I{d}" for d in cupti.include_dirs), f"-I{C_SHIM}"]


def build(
    cupti: Cupti | None = None,
    out_dir: Path | None = None,
    force: bool = False,
    experiments: bool = False,
) -> Path:
    """Return the path of the built library, compiling it if the cache has none.

    experiments: the benchmarks' variant, with the measurement-only switches of
    cupti_inject/src/experiments.h (cached apart from the product library).
    $XPU_PERF_INJECT_LIB names a library built elsewhere (tests, a read-only install)."""
    prebuilt = os.environ.get("XPU_PERF_INJECT_LIB")
    if prebuilt and cupti is None and out_dir is None and not experiments:
        if not Path(prebuilt).is_file():
            raise BuildError(f"XPU_PERF_INJECT_LIB={prebuilt} does not exist")
        return Path(prebuilt)
    cupti = cupti or find_cupti()
    variant = "-experiments" if experiments else ""
    key = f"cupti{cupti.version}{variant}-{_source_hash(str(cupti.lib_dir))}"
    names = (*CUPTI_SOURCES, *EXPERIMENT_SOURCES) if experiments else CUPTI_SOURCES
    flags = [
        *((EXPERIMENTS_DEFINE,) if experiments else ()),
        *include_flags(cupti),
        *(str(SOURCE_DIR / name) for name in sorted(names)),
        f"-L{cupti.lib_dir}",
        _link_name(cupti.lib_dir),
        f"-Wl,-rpath,{cupti.lib_dir}",
    ]
    return _build_library(
        LIBRARY_NAME,
        out_dir or cache_dir() / key,
        out_dir is None,
        "injection library",
        flags,
        force,
    )


def _build_library(
    name: str, target_dir: Path, cached: bool, what: str, flags: list[str], force: bool
) -> Path:
    """The library `name` in target_dir, compiled with CFLAGS + flags unless it is there.
    A library from the cache is loaded into the target: only from a cache nobody else could
    have written (collector/cache_trust.py); else a build of our own, in a private dir."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not compiler:
        raise BuildError(f"no C compiler (cc/gcc) on PATH: install gcc to build the {what}")
    target = target_dir / name
    if cached:
        untrusted = cache_trust.untrusted_reason(target, _cache_base())
        if untrusted is not None:
            target_dir = cache_trust.private_dir(f"xpu-perf-{name.removesuffix('.so')}-")
            target = target_dir / name
            cache_trust.refuse(what, untrusted, f"building it in {target_dir}")
    if target.exists() and not force:
        return target
    cache_trust.make_private_dirs(target_dir)
    with tempfile.TemporaryDirectory(dir=target_dir) as tmp:
        tmp_lib = Path(tmp) / name
        cmd = [compiler, *CFLAGS, *flags, "-o", str(tmp_lib), "-ldl"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"building {name} failed:\n{' '.join(cmd)}\n{proc.stderr}")
        os.chmod(tmp_lib, 0o755)  # the compiler's 0777 & ~umask: writable by all under 000
        os.replace(tmp_lib, target)
    return target


def build_sampler(out_dir: Path | None = None, force: bool = False) -> Path:
    """Return the path of the CPU sampler library, compiling it if the cache has none.

    It needs only a C compiler and glibc (no CUPTI), so CPU sampling works on machines
    without CUDA.  $XPU_PERF_SAMPLER_LIB names a library built elsewhere."""
    prebuilt = os.environ.get("XPU_PERF_SAMPLER_LIB")
    if prebuilt and out_dir is None:
        if not Path(prebuilt).is_file():
            raise BuildError(f"XPU_PERF_SAMPLER_LIB={prebuilt} does not exist")
        return Path(prebuilt)
    sources = [str(SOURCE_DIR / name) for name in sorted(SAMPLER_SOURCES)]
    target_dir = out_dir or cache_dir().parent / "sampler" / _source_hash("sampler")
    return _build_library(
        SAMPLER_NAME, target_dir, out_dir is None, "CPU sampler library", sources, force
    )


def main() -> int:
    """`python -m collector.inject_build [--force] [--experiments]`: build (or find) the
    libraries and print their paths; --experiments builds the benchmarks' injection library
    (measurement-only switches in) in place of the product one."""
    force = "--force" in sys.argv
    try:
        print(build_sampler(force=force))
        print(build(force=force, experiments="--experiments" in sys.argv))
    except BuildError as exc:
        print(f"xpu-perf: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
