"""The in-process CPU sampler end to end: `record --no-gpu` on programs with a known call
structure (two callers, 3:1, of one leaf), read back through trace_processor by `folded`.

- C built -O2 -g without frame pointers, and -O1 -g -fno-omit-frame-pointer (gcc shrink-wraps
  the leaf there, so a frame-pointer walk loses its caller): CFI must give main -> caller ->
  leaf on >= 95% of the samples and a 3:1 split within 5%.
- Pure Python on Debian's python3 (3.11) and on the CPythons scripts/build_cpythons.sh builds
  (3.13 read through _Py_DebugOffsets): <module> -> caller -> leaf as Python frames.
- The same with `record` run as an unprivileged user (uid 65534): no perf events are used.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.inject_build import build_sampler

from .conftest import REPO, run_cli

NATIVE = REPO / "tests" / "native"
# ~8,000 samples at 999 Hz per run: at 4 s (~4,000) a 3:1 split read 2.80 and 3.47 in about 1
# of 10 runs of the unprivileged test, too near the 5% the check allows.
CPU_SECONDS = "8"
FREQ = "999"
CPYTHON_CACHE = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xpu-perf" / "cpython"
)
_LINE = re.compile(r" \([^()]*:\d+\)")


def folded_samples(trace: Path, run=run_cli) -> Counter[str]:
    """Folded CPU stacks (Python frames without their ' (file:line)') -> sample count."""
    proc = run("folded", trace, "--mode", "cpu", "--unit", "samples")
    assert proc.returncode == 0, proc.stderr
    out: Counter[str] = Counter()
    for line in proc.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        out[_LINE.sub("", stack)] += int(count)
    return out


def split(stacks: Counter[str], root: str) -> tuple[float, float, int, int]:
    """(heavy/light ratio, share of samples with root -> caller -> leaf, heavy, light)."""
    heavy = sum(n for s, n in stacks.items() if f"{root};heavy_caller;leaf" in s)
    light = sum(n for s, n in stacks.items() if f"{root};light_caller;leaf" in s)
    total = sum(stacks.values())
    assert total > 0, "no CPU samples"
    return heavy / max(light, 1), (heavy + light) / total, heavy, light


def assert_three_to_one(stacks: Counter[str], root: str) -> None:
    ratio, full, heavy, light = split(stacks, root)
    top = "\n".join(f"{n} {s}" for s, n in stacks.most_common(5))
    assert abs(ratio - 3) / 3 <= 0.05, f"heavy:light {heavy}:{light} = {ratio:.2f}\n{top}"
    assert full >= 0.95, f"{full:.1%} of samples have {root} -> caller -> leaf\n{top}"


@pytest.fixture(scope="module")
def c_programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("shrink")
    src = NATIVE / "shrink_callers.c"
    flags = {
        "o2_no_fp": ["-O2", "-g", "-fomit-frame-pointer"],
        "o1_fp": ["-O1", "-g", "-fno-omit-frame-pointer"],
    }
    built = {}
    for name, f in flags.items():
        exe = out / name
        subprocess.run(["gcc", *f, "-o", str(exe), str(src)], check=True)
        built[name] = exe
    return built


@pytest.mark.parametrize("variant", ["o2_no_fp", "o1_fp"])
def test_c_callers_unwound_by_cfi(
    c_programs: dict[str, Path], variant: str, tmp_path: Path
) -> None:
    trace = tmp_path / "c.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--freq", FREQ, "-o", trace, "--", c_programs[variant], CPU_SECONDS
    )
    assert proc.returncode == 0, proc.stderr
    assert "unwound to the root" in proc.stderr
    assert_three_to_one(folded_samples(trace), "main")


def python_interpreters() -> list:
    params = [pytest.param("/usr/bin/python3", id="debian-python3")]
    for minor in ("3.13", "3.14"):
        exe = CPYTHON_CACHE / minor / "bin" / f"python{minor}"
        params.append(
            pytest.param(
                str(exe),
                id=f"python{minor}",
                marks=pytest.mark.skipif(
                    not exe.exists(),
                    reason=f"python{minor} not built (scripts/build_cpythons.sh could not "
                    "fetch its source package)",
                ),
            )
        )
    return params


@pytest.mark.parametrize("python", python_interpreters())
def test_python_callers_have_python_frames(python: str, tmp_path: Path) -> None:
    trace = tmp_path / "py.perfetto-trace"
    script = NATIVE / "two_callers.py"
    proc = run_cli(
        "record", "--no-gpu", "--freq", FREQ, "-o", trace, "--", python, script, CPU_SECONDS
    )
    assert proc.returncode == 0, proc.stderr
    assert "with Python frames" in proc.stderr
    assert_three_to_one(folded_samples(trace), "<module>")


# ---- unprivileged ----

NOBODY = 65534
_SKIP_PACKAGES = ("pip", "setuptools", "_pytest", "pytest", "hypothesis", "bcc", "__pycache__")


@pytest.fixture(scope="module")
def nobody_tree() -> Iterator[Path]:
    """A copy of xpu-perf and its dependencies that uid 65534 can read and run with Debian's
    python3 (the venv's interpreter and the checkout may sit under root's 0700 home)."""
    if os.geteuid() != 0:
        pytest.fail("the unprivileged-record test needs root to switch to uid 65534")
    # Not under pytest's tmp root: that is 0700, and uid 65534 must reach this tree.
    root = Path(tempfile.mkdtemp(prefix="xpu-perf-nobody-"))
    root.chmod(0o755)
    for part in ("collector", "exporters", "protos", "cupti_inject"):
        shutil.copytree(
            REPO / part, root / "app" / part, ignore=shutil.ignore_patterns("__pycache__")
        )
    import numpy  # the venv's site-packages, wherever it is

    site = Path(numpy.__file__).resolve().parent.parent
    shutil.copytree(site, root / "site", ignore=shutil.ignore_patterns(*_SKIP_PACKAGES))
    home = root / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    work = root / "work"
    work.mkdir()
    os.chown(work, NOBODY, NOBODY)
    for dirpath, _dirs, _files in os.walk(root):
        os.chmod(dirpath, 0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


def run_as_nobody(tree: Path):
    def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(tree / "home"),
            "PYTHONPATH": f"{tree / 'app'}:{tree / 'site'}",
        }
        return subprocess.run(
            ["/usr/bin/python3", "-m", "collector.cli", *map(str, args)],
            capture_output=True,
            text=True,
            cwd=tree / "work",
            env=env,
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            timeout=600,
        )

    return run


def test_unprivileged_record(nobody_tree: Path, c_programs: dict[str, Path]) -> None:
    run = run_as_nobody(nobody_tree)
    work = nobody_tree / "work"
    exe = work / "o2_no_fp"
    shutil.copy2(c_programs["o2_no_fp"], exe)
    exe.chmod(0o755)
    proc = run(
        "record",
        "--no-gpu",
        "--freq",
        FREQ,
        "-o",
        work / "c.perfetto-trace",
        "--",
        exe,
        CPU_SECONDS,
    )
    assert proc.returncode == 0, proc.stderr
    assert_three_to_one(folded_samples(work / "c.perfetto-trace", run), "main")
    script = work / "two_callers.py"
    shutil.copy2(NATIVE / "two_callers.py", script)
    trace = work / "py.perfetto-trace"
    proc = run(
        "record",
        "--no-gpu",
        "--freq",
        FREQ,
        "-o",
        trace,
        "--",
        "/usr/bin/python3",
        script,
        CPU_SECONDS,
    )
    assert proc.returncode == 0, proc.stderr
    assert_three_to_one(folded_samples(trace, run), "<module>")


def test_sampler_library_needs_no_cupti() -> None:
    """The sampler is loaded into every process: it must not pull CUPTI or CUDA in."""
    lib = build_sampler()
    needed = subprocess.run(["readelf", "-d", str(lib)], capture_output=True, text=True, check=True)
    libs = re.findall(r"\(NEEDED\).*\[(.*)\]", needed.stdout)
    assert libs and not any("cupti" in x or "cuda" in x for x in libs), libs


def test_posix_timer_clock(c_programs: dict[str, Path], tmp_path: Path) -> None:
    """Where perf events are refused (perf_event_paranoid 3), POSIX CPU-time timers sample:
    stacks stay complete (the split is not checked: tick-driven timers alias with loops)."""
    trace = tmp_path / "timer.perfetto-trace"
    env = {**os.environ, "XPU_PERF_CPU_CLOCK": "timer"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "record",
            "--no-gpu",
            "-o",
            str(trace),
            "--",
            str(c_programs["o2_no_fp"]),
            "2",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    _ratio, full, heavy, light = split(folded_samples(trace), "main")
    assert full >= 0.95 and heavy > light > 0, (full, heavy, light)
    meta = run_cli("query", trace, "select * from xpu_metadata", "--format", "csv")
    assert "cpu_threads_posix_timer" in meta.stdout, meta.stdout


def test_kernel_frames_on_top_as_root(tmp_path: Path) -> None:
    """As root, the eBPF kernel-mode sampler signals the thread and its kernel stack is put on
    top of the in-process user stack (CFI + Python frames) of the same sample."""
    assert os.geteuid() == 0, "CI runs as root: the kernel-frame join needs eBPF"
    trace = tmp_path / "sys.perfetto-trace"
    script = NATIVE / "syscall_reader.py"
    # From the start: every read(2) sample has its kernel stack to join (by default the
    # sampler begins once compiled: tests/test_kernel_sampler_late.py).
    proc = run_cli(
        "record", "--no-gpu", "--kernel-stacks-from-start", "-o", trace, "--",
        "/usr/bin/python3", script, "3",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    stacks = folded_samples(trace)
    in_read = {s: n for s, n in stacks.items() if "<module>;read_zeros" in s}
    with_kernel = sum(n for s, n in in_read.items() if "do_syscall_64" in s)
    total = sum(stacks.values())
    assert sum(in_read.values()) > 0.2 * total, stacks.most_common(5)
    assert with_kernel >= 0.8 * sum(in_read.values()), stacks.most_common(5)
    for s in in_read:  # the kernel frames are on top of the user ones, never between them
        if "do_syscall_64" in s:
            assert s.index("<module>;read_zeros") < s.index("do_syscall_64"), s
    joined = re.search(r"(\d+) with kernel frames \(of (\d+) eBPF", proc.stderr)
    assert joined and int(joined.group(1)) >= 0.9 * int(joined.group(2)), proc.stderr


@pytest.mark.parametrize("faulthandler", [False, True], ids=["default", "faulthandler"])
def test_target_crash_is_untouched(tmp_path: Path, faulthandler: bool) -> None:
    """The sampler keeps a SIGSEGV handler for its Python walk: a fault of the target's own
    still ends it as before (exit 128+11, its own handler's report), with a trace written."""
    trace = tmp_path / "crash.perfetto-trace"
    flags = ["-X", "faulthandler"] if faulthandler else []
    code = (
        "import ctypes, time\n"
        "t = time.process_time() + 0.5\n"
        "while time.process_time() < t: pass\n"
        "ctypes.string_at(0)"
    )
    proc = run_cli("record", "--no-gpu", "-o", trace, "--", "/usr/bin/python3", *flags, "-c", code)
    assert proc.returncode == 128 + 11, proc.stderr
    assert ("Fatal Python error: Segmentation fault" in proc.stderr) == faulthandler, proc.stderr
    assert trace.exists()


def test_unwinds_through_signal_frames(tmp_path: Path) -> None:
    """Work done in a signal handler: its samples unwind through the kernel's signal frame
    (__restore_rt's CFI) to the interrupted function and on to main."""
    exe = tmp_path / "signal_work"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(exe), str(NATIVE / "signal_work.c")], check=True)
    trace = tmp_path / "signal.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--no-kernel-stacks", "--freq", FREQ, "-o", trace, "--", exe, "2"
    )
    assert proc.returncode == 0, proc.stderr
    stacks = folded_samples(trace)
    in_handler = {s: n for s, n in stacks.items() if s.endswith(";handler_work")}
    through = sum(n for s, n in in_handler.items() if ";main;main_loop;" in s)
    assert sum(in_handler.values()) >= 50, stacks.most_common(5)
    assert through >= 0.95 * sum(in_handler.values()), stacks.most_common(5)


def test_sampler_handlers_never_in_the_stacks(tmp_path: Path) -> None:
    """A SIGPROF and a SIGURG (the eBPF kernel-mode sampler's, as root) pending together:
    the kernel starts one handler and stacks the other on it at its first instruction, so
    unless each handler holds the other's signal back, a sample names the sampler's own
    handler instead of the program (on about one recording in four, ~15% of the samples,
    where the two samplers' clocks fall into step).  paired_signals makes it every time."""
    assert os.geteuid() == 0, "CI runs as root: the SIGURG handler is installed as root"
    exe = tmp_path / "paired_signals"
    src = NATIVE / "paired_signals.c"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(exe), str(src)], check=True)
    trace = tmp_path / "paired.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--kernel-stacks-from-start", "--freq", FREQ, "-o", trace, "--",
        exe, "2",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # The kernel-mode sampler ran, so the SIGURG handler was there to be stacked on.
    assert re.search(r"cpu samples in the kernel: \d+ with kernel frames", proc.stderr), proc.stderr
    folded = run_cli("folded", trace, "--mode", "cpu", "--unit", "samples", "--all-frames")
    assert folded.returncode == 0, folded.stderr
    stacks: Counter[str] = Counter()
    for line in folded.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        stacks[stack] += int(count)
    handlers = ("on_kernel_signal", "on_sample_signal", "take_sample")
    in_handler = {s: n for s, n in stacks.items() if any(h in s.split(";") for h in handlers)}
    assert in_handler == {}, sorted(in_handler.items(), key=lambda kv: -kv[1])[:3]
    # Held back, each round's sample is delivered where the program unblocks it: the pairs
    # happened (one a round, ~3 ms of CPU each) and every one is the program's.
    at_unblock = sum(
        n for s, n in stacks.items() if s.endswith(";main;sigprocmask;pthread_sigmask")
    )
    assert at_unblock >= 300 and at_unblock >= 0.8 * sum(stacks.values()), stacks.most_common(5)


def test_python_c_program_counts_its_python_frames(tmp_path: Path) -> None:
    """`python -c` code has no .py file (its frames' file is `<string>`): the summary still
    counts its samples as having Python frames, which they have."""
    trace = tmp_path / "c.perfetto-trace"
    code = (
        "import time\n"
        "def spin_here():\n"
        "    end = time.monotonic() + 1.5\n"
        "    while time.monotonic() < end:\n"
        "        pass\n"
        "spin_here()\n"
    )
    proc = run_cli(
        "record", "--no-gpu", "--no-kernel-stacks", "-o", trace, "--", sys.executable, "-c", code
    )
    assert proc.returncode == 0, proc.stderr
    share = re.search(r"with Python frames: ([0-9.]+)%", proc.stderr)
    assert share and float(share.group(1)) >= 90.0, proc.stderr
