"""The CPU sampler follows the recording's capture windows (cupti_inject/src/window_control.h):
loaded into a CPU-bound program with a control page, it takes samples only while a window is
open, and outside one its clocks are stopped (no signal arrives), not filtered afterwards."""

from __future__ import annotations

import mmap
import os
import subprocess
import time
from pathlib import Path

import pytest

from collector.inject_build import build_sampler
from collector.sources.cpu_stream import InprocessCpuSource
from collector.window_control import WindowControl

from .conftest import REPO

HZ = 999


@pytest.fixture(scope="module")
def burner(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("burn") / "shrink_callers"
    src = REPO / "tests" / "native" / "shrink_callers.c"
    subprocess.run(["gcc", "-O2", "-g", "-o", str(exe), str(src)], check=True)
    return exe


def sampled(out: Path, control: WindowControl, program: list[str]) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ,
        LD_PRELOAD=str(build_sampler()),
        XPU_PERF_CPU_HZ=str(HZ),
        XPU_PERF_CPU_OUT_DIR=str(out),
        **control.env(),
    )
    return subprocess.Popen(program, env=env)


def samples(out: Path) -> tuple[list[int], InprocessCpuSource]:
    source = InprocessCpuSource(out)
    ts = [ev.ts for ev in source.events() if type(ev).__name__ == "CpuSample"]
    return ts, source


def test_samples_only_inside_the_tree_window(burner: Path, tmp_path: Path) -> None:
    with WindowControl(tmp_path / "window.ctl") as control:
        proc = sampled(tmp_path, control, [str(burner), "3"])
        time.sleep(1.0)
        control.set_tree_open(True)
        opened = time.monotonic_ns()
        time.sleep(1.0)
        control.set_tree_open(False)
        closed = time.monotonic_ns()
        assert proc.wait(timeout=60) == 0
    ts, source = samples(tmp_path)
    # One CPU-bound thread sampled at HZ for the 1 s window (it may get less than a whole CPU
    # on a loaded machine, and the clock starts at the sampler's next 20 ms round).
    assert len(ts) >= HZ // 2, len(ts)
    assert min(ts) >= opened - 1_000_000 and max(ts) <= closed, (opened, closed, min(ts), max(ts))
    # Signals that were already on their way when the window closed: a handful, not a second's.
    assert source.counts["samples_outside_window"] <= 20


def test_never_opened_window_sends_no_signal(burner: Path, tmp_path: Path) -> None:
    with WindowControl(tmp_path / "window.ctl") as control:
        assert sampled(tmp_path, control, [str(burner), "1"]).wait(timeout=60) == 0
    ts, source = samples(tmp_path)
    assert ts == []
    assert source.counts["samples_outside_window"] == 0  # the clocks never ran
    assert source.counts["threads_sampled"] >= 1  # the thread was seen, its clock kept stopped


def test_a_process_window_opens_sampling_for_the_whole_tree(burner: Path, tmp_path: Path) -> None:
    """What an injection library does at cudaProfilerStart: process_windows + 1 (at byte 16
    of the page, window_control.h), and - 1 at the stop."""
    with WindowControl(tmp_path / "window.ctl") as control:
        proc = sampled(tmp_path, control, [str(burner), "2"])
        with open(control.path, "r+b") as f, mmap.mmap(f.fileno(), 0) as page:
            time.sleep(0.5)
            page[16:20] = (1).to_bytes(4, "little", signed=True)
            assert control.process_windows == 1
            time.sleep(0.5)
            page[16:20] = (0).to_bytes(4, "little", signed=True)
        assert proc.wait(timeout=60) == 0
    ts, _ = samples(tmp_path)
    assert HZ // 4 <= len(ts) <= HZ * 0.6, len(ts)
