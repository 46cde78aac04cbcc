"""The injection and sampler libraries are built from sources listed by name, and the product
injection library carries none of the measurement-only switches (cupti_inject/src/experiments.h):
`record` must not be steerable by a lab switch left in the environment."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from collector import inject_build
from collector.inject_build import (
    CFLAGS,
    CUPTI_SOURCES,
    EXPERIMENT_SOURCES,
    EXPERIMENTS_DEFINE,
    SAMPLER_SOURCES,
    SOURCE_DIR,
    BuildError,
    Cupti,
    include_flags,
)

# Every switch experiments.c reads; none may be in a product build.
EXPERIMENT_SWITCHES = (
    "XPU_PERF_CALLBACKS",
    "XPU_PERF_PARSE",
    "XPU_PERF_CALLBACK_NOOP",
    "XPU_PERF_SELFTIME",
    "XPU_PERF_HW_TRACE",
)
# Removed outright (their answers are in docs/benchmarks.md): in neither build.
REMOVED_SWITCHES = (
    "XPU_PERF_TS_CALLBACK",
    "XPU_PERF_SERIAL_KERNELS",
    "XPU_PERF_API_ACTIVITY",
    "XPU_PERF_DOMAINS",
    "XPU_PERF_BACKTRACE",
    "XPU_PERF_UNWIND_PREFETCH",
    "XPU_PERF_ZEROED_BUFFERS",
    "XPU_PERF_NESTED_DRIVER",
)
# Experiment symbols (hidden, so in the symbol table, not the dynamic one).
EXPERIMENT_SYMBOLS = ("xp_exp", "xp_experiments_read", "xp_selftime_report")


def test_every_source_is_in_a_library() -> None:
    listed = {*CUPTI_SOURCES, *EXPERIMENT_SOURCES, *SAMPLER_SOURCES}
    on_disk = {p.name for p in SOURCE_DIR.glob("*.c")}
    assert on_disk - listed == set(), "add each new .c file to a list in collector/inject_build.py"
    assert listed - on_disk == set(), "a listed source does not exist"
    assert not set(EXPERIMENT_SOURCES) & set(CUPTI_SOURCES)
    assert not set(EXPERIMENT_SOURCES) & set(SAMPLER_SOURCES)


def _cupti() -> Cupti:
    try:
        return inject_build.find_cupti()
    except BuildError as exc:
        pytest.skip(f"no CUPTI headers: {exc}")


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} (binutils) not on PATH")
    return path


def _strings(lib: Path) -> str:
    return subprocess.run(
        [_tool("strings"), "-a", str(lib)], capture_output=True, text=True, check=True
    ).stdout


def _symbols(lib: Path) -> set[str]:
    out = subprocess.run([_tool("nm"), str(lib)], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    cupti = _cupti()
    out = tmp_path_factory.mktemp("inject_build")
    return {
        "product": inject_build.build(cupti, out_dir=out / "product", force=True),
        "experiments": inject_build.build(
            cupti, out_dir=out / "experiments", force=True, experiments=True
        ),
        "sampler": inject_build.build_sampler(out_dir=out / "sampler", force=True),
    }


def test_product_library_has_no_experiments(libraries: dict[str, Path]) -> None:
    text = _strings(libraries["product"])
    symbols = _symbols(libraries["product"])
    assert "XPU_PERF_OUT_DIR" in text  # the check reads the right thing
    for switch in (*EXPERIMENT_SWITCHES, *REMOVED_SWITCHES):
        assert switch not in text, switch
    assert "xpu-perf selftime" not in text
    for symbol in EXPERIMENT_SYMBOLS:
        assert symbol not in symbols, symbol
    assert {"InitializeInjection", "InitializeInjectionNvtx2", "xpu_perf_launch_marker"} <= symbols


def test_experiments_library_has_the_measurement_switches(libraries: dict[str, Path]) -> None:
    text = _strings(libraries["experiments"])
    for switch in EXPERIMENT_SWITCHES:
        assert switch in text, switch
    for switch in REMOVED_SWITCHES:
        assert switch not in text, switch
    assert set(EXPERIMENT_SYMBOLS) <= _symbols(libraries["experiments"])


def test_sampler_library_has_no_cupti_code(libraries: dict[str, Path]) -> None:
    symbols = _symbols(libraries["sampler"])
    assert "InitializeInjection" not in symbols
    assert "on_callback" not in symbols


@pytest.mark.parametrize("variant", ["product", "experiments"])
def test_sources_compile_without_warnings(variant: str) -> None:
    """-Wall -Wextra (CFLAGS) clean, each file on its own (-Werror)."""
    cupti = _cupti()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    names = CUPTI_SOURCES + (EXPERIMENT_SOURCES if variant == "experiments" else ())
    flags = [f for f in CFLAGS if f != "-shared"]
    if variant == "experiments":
        flags.append(EXPERIMENTS_DEFINE)
    includes = include_flags(cupti)
    for name in (*names, *SAMPLER_SOURCES):
        proc = subprocess.run(
            [cc, *flags, *includes, "-Werror", "-c", "-o", os.devnull, str(SOURCE_DIR / name)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, f"{name}:\n{proc.stderr}"


def test_no_file_calls_into_the_entry_point() -> None:
    """inject.c is the entry (InitializeInjection) and the set-up order only: it defines no
    other global symbol, and no other file of the library needs one of its symbols (the
    shared state is at the bottom, state.c; the teardown in lifecycle.c; the rest of the
    stack: tests/test_c_layers.py)."""
    cupti = _cupti()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    nm = _tool("nm")
    flags = [f for f in CFLAGS if f != "-shared"]
    includes = include_flags(cupti)

    def symbols(name: str, which: str) -> set[str]:
        """Global symbols the object of `name` defines (--defined-only) or needs (-u)."""
        obj = Path(os.environ.get("TMPDIR", "/tmp")) / f"xpu-perf-nm-{os.getpid()}-{name}.o"
        try:
            subprocess.run(
                [cc, *flags, *includes, "-c", "-o", str(obj), str(SOURCE_DIR / name)], check=True
            )
            out = subprocess.run(
                [nm, "-g", which, str(obj)], capture_output=True, text=True, check=True
            ).stdout
        finally:
            obj.unlink(missing_ok=True)
        return {line.split()[-1] for line in out.splitlines() if line.strip()}

    entry = symbols("inject.c", "--defined-only")
    assert entry == {"InitializeInjection"}
    for name in CUPTI_SOURCES:
        if name != "inject.c":
            assert not symbols(name, "-u") & entry, f"{name} calls into inject.c"
