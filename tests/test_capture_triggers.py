"""Capture windows opened by an NVTX range and by the outside trigger (a signal to `record`),
and the CPU side of windows: record's own windows under --no-gpu, and CPU samples only inside
the windows the injection library opens.  GPU work runs against the fake CUPTI
(tests/fake_cupti), which plays NVTX push/pop, start/end, domains and registered strings as
the NVTX injection interface delivers them; traces are read back with trace_processor."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import REPO, run_cli
from .native.bpf_harness import requires_bpf
from .test_capture_windows import assert_complete, kernel_names, windows
from .test_cupti_fake import metadata, pytestmark, record  # noqa: F401

N = 30  # fake_app's LAUNCHES in the nvtx and toggle modes
NVTX_STEPS = {
    "nvtx_kernel_1": N + 2,  # push/pop "step" (nested "inner" inside it)
    "nvtx_kernel_2": 5,  # start/end "step" (another start/end range inside it)
    "nvtx_kernel_3": 4,  # push "step" in domain "app"
    "nvtx_kernel_4": 6,  # the same by a registered string
    "nvtx_kernel_5": 2,  # pushEx "step" with a "step" nested in it
}


def nvtx_record(fake, tmp_path: Path, *flags: str) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path / "nvtx.perfetto-trace"
    proc = record(fake, out, fake.app, N, 0, "nvtx", flags=flags)
    assert proc.returncode == 0, proc.stderr
    return out, proc


def test_nvtx_range_windows_record_every_range_named_step(fake, tmp_path: Path) -> None:
    out, proc = nvtx_record(
        fake, tmp_path, "--capture-range", "nvtx:step", "--capture-range-end", "repeat"
    )
    assert "capture windows (nvtx:step): 5" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == NVTX_STEPS  # no outside_kernel: nothing outside a range
        assert_complete(t)
        found = windows(t)
        assert [(w["reason"], w["end_reason"]) for w in found] == [("nvtx:step", "range end")] * 5
        assert metadata(t, "windows") == 5
        assert metadata(t, "capture_range") == "nvtx:step"
        # Each window holds exactly its range's launches.
        for w, (name, count) in zip(found, NVTX_STEPS.items(), strict=True):
            inside = t.query(
                "select name, count(*) n from slice where category = 'kernel' and id in "
                "(select f.slice_in from flow f join slice a on a.id = f.slice_out "
                f"where a.ts >= {w['ts']} and a.ts <= {w['ts'] + w['dur']}) group by name"
            )
            assert [(r["name"], r["n"]) for r in inside] == [(name, count)]


def test_nvtx_range_window_stops_after_the_first_by_default(fake, tmp_path: Path) -> None:
    out, proc = nvtx_record(fake, tmp_path, "--capture-range", "nvtx:step")
    assert "4 openings after the last one ignored" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {"nvtx_kernel_1": N + 2}
        assert_complete(t)
        assert len(windows(t)) == 1


def test_nvtx_range_in_one_domain(fake, tmp_path: Path) -> None:
    out, _ = nvtx_record(
        fake, tmp_path, "--capture-range", "nvtx:step@app", "--capture-range-end", "repeat:5"
    )
    with open_trace(out) as t:
        # Only domain "app"'s ranges: by text, and by the string registered in that domain.
        assert kernel_names(t) == {"nvtx_kernel_3": 4, "nvtx_kernel_4": 6}
        assert_complete(t)


def test_nvtx_range_never_begun_says_so(fake, tmp_path: Path) -> None:
    out, proc = nvtx_record(fake, tmp_path, "--capture-range", "nvtx:missing")
    assert "capture windows: none (no NVTX range named missing began)" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {}
        assert t.scalar("select count(*) from slice where category = 'cuda_api'") == 0


def test_signal_to_record_opens_and_closes_windows(fake, tmp_path: Path) -> None:
    # fake_app "toggle" sends SIGUSR2 to its parent, record: open, close, open; the last
    # window ends with the process.
    out = tmp_path / "toggle.perfetto-trace"
    proc = record(fake, out, fake.app, N, 4, "toggle", flags=("--capture-range", "signal"))
    assert proc.returncode == 4, proc.stderr
    assert "send SIGUSR2 to" in proc.stderr
    assert "capture windows (signal): 2" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {"window_kernel": N, "second_window_kernel": 4}
        assert_complete(t)
        found = windows(t)
        assert [(w["reason"], w["end_reason"]) for w in found] == [
            ("signal", "signal"),
            ("signal", "exit"),
        ]
        assert metadata(t, "toggles") == 3
        assert t.scalar("select count(*) from slice where category = 'sync'") == 1


def test_signal_window_limit_counts_each_refused_opening_once(fake, tmp_path: Path) -> None:
    out = tmp_path / "toggle_stop.perfetto-trace"
    flags = ("--capture-range", "signal", "--capture-range-end", "stop")
    proc = record(fake, out, fake.app, N, 0, "toggle", flags=flags)
    assert proc.returncode == 0, proc.stderr
    assert "capture windows (signal): 1, 1 openings after the last one ignored" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {"window_kernel": N}
        assert metadata(t, "cupti_windows_ignored") == 1  # not once per 10 ms poll
        assert_complete(t)


BURN = """
import os, signal, sys, time
def spin(seconds):
    # Wall time by the vDSO: user-mode time, which the sampler counts (process_time() is a
    # system call, and kernel-mode time is not sampled without root).
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass
def outside(seconds):
    spin(seconds)
def inside(seconds):
    spin(seconds)
outside(0.6)
os.kill(os.getppid(), signal.SIGUSR1)
time.sleep(0.1)
inside(1.0)
os.kill(os.getppid(), signal.SIGUSR1)
time.sleep(0.1)
outside(0.6)
"""


CPU_SAMPLES = """
    select ps.id, ps.ts, ps.callsite_id from perf_sample ps
    where ps.perf_session_id in (
        select a.int_value from track t join args a
        on a.arg_set_id = t.dimension_arg_set_id and a.key = 'perf_session_id'
        where t.name = 'cpu-clock')
"""


def cpu_sample_counts(t, window: dict) -> tuple[int, int]:
    """CPU samples in all, and those outside `window`."""
    row = t.query(
        f"select count(*) n, sum(ts < {window['ts']} or ts > {window['ts'] + window['dur']}) "
        f"outside from ({CPU_SAMPLES})"
    )[0]
    return row["n"], row["outside"] or 0


def cpu_sample_frames(t) -> set[str]:
    """Every frame name of every CPU sample's stack."""
    rows = t.query(
        f"with recursive s as ({CPU_SAMPLES}), chain(callsite_id) as ("
        "select callsite_id from s union "
        "select c.parent_id from chain join stack_profile_callsite c on c.id = chain.callsite_id "
        "where c.parent_id is not null) "
        "select distinct f.name from chain "
        "join stack_profile_callsite c on c.id = chain.callsite_id "
        "join stack_profile_frame f on f.id = c.frame_id"
    )
    return {r["name"] for r in rows if r["name"]}


def test_cpu_only_signal_window_samples_only_inside(tmp_path: Path) -> None:
    script = tmp_path / "burn.py"
    script.write_text(BURN)
    out = tmp_path / "cpu.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--no-kernel-stacks", "--freq", "499",
        "--capture-range", "signal", "--toggle-signal", "USR1",
        "-o", out, "--", sys.executable, script,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "capture windows (signal): 1" in proc.stderr
    with open_trace(out) as t:
        (w,) = windows(t)
        assert (w["reason"], w["end_reason"]) == ("signal", "signal")
        assert 0.9e9 < w["dur"] < 2e9
        n, outside = cpu_sample_counts(t, w)
        # ~1 s of CPU at 499 Hz, all inside the window (the sampler's clocks were stopped).
        assert n >= 499 // 3, proc.stderr
        assert outside == 0
        frames = cpu_sample_frames(t)
        assert any(f.startswith("inside") for f in frames), frames
        assert not any(f.startswith("outside") for f in frames), frames
        assert metadata(t, "windows") == 1


def test_cpu_only_delay_window(tmp_path: Path) -> None:
    script = tmp_path / "spin.py"
    script.write_text(
        "import time\nend = time.monotonic() + 2.5\nwhile time.monotonic() < end: pass\n"
    )
    out = tmp_path / "delay.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--no-kernel-stacks", "--freq", "499", "--delay", "0.8",
        "--duration", "1", "-o", out, "--", sys.executable, script,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        (w,) = windows(t)
        assert (w["reason"], w["end_reason"]) == ("delay", "duration")
        assert abs(w["dur"] - 1_000_000_000) < 60_000_000
        n, outside = cpu_sample_counts(t, w)
        assert outside == 0
        assert n >= 499 // 3


def test_cpu_samples_follow_the_profiler_api_window(fake, tmp_path: Path) -> None:
    """The injection library's own window (cudaProfilerStart/Stop) opens the CPU sampler of
    the tree: samples only between the two calls, none of the burns outside them."""
    out = tmp_path / "cpu_gpu.perfetto-trace"
    env = dict(os.environ, XPU_PERF_INJECT_LIB=str(fake.injection))
    proc = subprocess.run(
        [
            sys.executable, "-m", "collector.cli", "record", "--no-kernel-stacks",
            "--freq", "499", "--capture-range", "cudaProfilerApi", "-o", str(out), "--",
            str(fake.app), "10", "0", "profiler_cpu",
        ],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        (w,) = windows(t)
        assert kernel_names(t) == {"window_kernel": 10}
        n, outside = cpu_sample_counts(t, w)
        # 0.5 s of CPU inside at 499 Hz; the 2 x 0.5 s outside left no sample.
        assert n >= 499 // 5, proc.stderr
        assert outside == 0
        frames = cpu_sample_frames(t)
        assert "burn_inside_window" in frames
        assert "burn_outside_window" not in frames


def test_record_help_names_every_capture_range() -> None:
    proc = run_cli("record", "--help")
    for mode in ("cudaProfilerApi", "nvtx:NAME", "signal", "--toggle-signal"):
        assert mode in proc.stdout


IO_PHASES = """
import os, time
t0 = time.monotonic()
def until(t, work):
    while time.monotonic() - t0 < t:
        work()
def outside_io():
    os.pread(fd, 1 << 20, 0)  # kernel-mode time: /dev/zero fills the buffer
def inside_io():
    os.pread(fd, 1 << 20, 0)
fd = os.open("/dev/zero", os.O_RDONLY)
until(0.6, outside_io)
until(1.0, lambda: time.sleep(0.01))
until(1.6, inside_io)
until(2.0, lambda: time.sleep(0.01))
until(2.6, outside_io)
"""


@requires_bpf
@pytest.mark.parametrize("sampler", ["inprocess", "ebpf"])
def test_ebpf_samplers_pause_outside_the_window(tmp_path: Path, sampler: str) -> None:
    """As root the eBPF samplers follow the windows too: the kernel-mode sampler beside the
    in-process one (kernel frames on top), and `--cpu-sampler ebpf`."""
    script = tmp_path / "io.py"
    script.write_text(IO_PHASES)
    out = tmp_path / f"{sampler}.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--cpu-sampler", sampler, "--freq", "499", "--delay", "0.8",
        "--duration", "1", "-o", out, "--", sys.executable, script,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        (w,) = windows(t)
        n, outside = cpu_sample_counts(t, w)
        assert outside == 0, proc.stderr
        assert n >= 499 // 5, proc.stderr
        frames = cpu_sample_frames(t)
        assert not any(f.startswith("outside_io") for f in frames), frames
        if sampler == "inprocess":
            assert any(f.startswith("inside_io") for f in frames), frames


def test_toggle_signal_is_caught_from_the_hint_on() -> None:
    """record prints where to send the signal before it builds and starts its sources (which
    take seconds with eBPF): a signal in that time toggles the window instead of killing it."""
    import signal as signals

    from collector.recording.windows import CapturePlan, TreeWindows

    plan = CapturePlan(mode="signal", toggle_signal=signals.SIGUSR2)
    before = signals.getsignal(signals.SIGUSR2)
    tree = TreeWindows(plan)
    try:
        os.kill(os.getpid(), signals.SIGUSR2)
        assert tree.control.tree_open
        os.kill(os.getpid(), signals.SIGUSR2)
        assert not tree.control.tree_open
        assert tree.toggles == 2 and len(tree.windows) == 1
    finally:
        tree.close()
    assert signals.getsignal(signals.SIGUSR2) == before
