"""As root, the eBPF kernel-mode sampler is compiled while the target runs (bcc's clang takes
seconds), not before it: the target starts at once, the sampler follows its tree once ready,
and the kernel-mode CPU time before then (unsampled) is measured and said, never lost
silently.  --kernel-stacks-from-start makes the target wait for it instead."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .conftest import REPO, run_cli
from .test_cpu_sampler import folded_samples

NATIVE = REPO / "tests" / "native"
_BEGAN = re.compile(
    r"the eBPF kernel-mode sampler began (\d+\.\d+) s after the target; before it, (\d+) ms of "
    r"kernel-mode CPU time unsampled \(~(\d+) samples at (\d+) Hz\)"
)
_ENDED_FIRST = re.compile(
    r"the target ended before the eBPF kernel-mode sampler was compiled; before it, (\d+) ms "
    r"of kernel-mode CPU time unsampled \(~(\d+) samples"
)


# bcc's cleanup at exit run beside or after record's own: "Exception ignored in atexit
# callback ... Failed to detach BPF from tracepoint".
NOISE = ("Traceback", "Exception ignored", "Failed to detach", "Bad file descriptor")


def _quiet(stderr: str) -> None:
    for noise in NOISE:
        assert noise not in stderr, stderr


def _metadata(trace: Path) -> dict[str, str]:
    proc = run_cli("query", trace, "select key, display_value from xpu_metadata", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    _quiet(proc.stderr)
    rows = [line.split(",", 1) for line in proc.stdout.splitlines()[1:]]
    return {name: value for name, value in rows}


def test_target_ending_first_counts_its_kernel_time(tmp_path: Path) -> None:
    """A program over before clang is: no kernel frames, and its kernel-mode time (dd's
    copies from /dev/zero) said as unsampled, in the summary and the metadata."""
    assert os.geteuid() == 0, "CI runs as root: the kernel-mode sampler needs eBPF"
    trace = tmp_path / "dd.perfetto-trace"
    dd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=4M", "count=400"]
    proc = run_cli("record", "--no-gpu", "-o", trace, "--", *dd)
    assert proc.returncode == 0, proc.stderr
    _quiet(proc.stderr)
    ended = _ENDED_FIRST.search(proc.stderr)
    assert ended, proc.stderr
    unsampled_ms = int(ended.group(1))
    assert unsampled_ms >= 20, proc.stderr  # dd copied 1.6 GB in the kernel
    meta = _metadata(trace)
    assert int(meta["cpu_kernel_unsampled_ms"]) == unsampled_ms, meta
    assert int(meta["cpu_kernel_attach_delay_ms"]) == -1, meta
    assert int(meta["cpu_kernel_unsampled_samples"]) == unsampled_ms * 99 // 1000, meta


def test_sampler_follows_a_running_target(tmp_path: Path) -> None:
    """A program that runs past the compile: the sampler began during it (said with its
    delay), the kernel-mode time before then counted, and from then on its kernel stacks
    are joined on top of the in-process samples taken in read(2)."""
    assert os.geteuid() == 0, "CI runs as root: the kernel-mode sampler needs eBPF"
    trace = tmp_path / "late.perfetto-trace"
    script = NATIVE / "syscall_reader.py"
    proc = run_cli("record", "--no-gpu", "-o", trace, "--", "/usr/bin/python3", script, "12")
    assert proc.returncode == 0, proc.stderr
    _quiet(proc.stderr)
    began = _BEGAN.search(proc.stderr)
    assert began, proc.stderr
    delay_s, unsampled_ms = float(began.group(1)), int(began.group(2))
    # Half of the reader's CPU time is read(2): some of it came before the sampler, never
    # more than the time that passed (one thread).
    assert 0 < unsampled_ms <= delay_s * 1000 + 10, proc.stderr
    meta = _metadata(trace)
    assert int(meta["cpu_kernel_unsampled_ms"]) == unsampled_ms, meta
    joined = re.search(r"(\d+) with kernel frames \(of (\d+) eBPF", proc.stderr)
    assert joined and int(joined.group(2)) > 0, proc.stderr
    assert int(joined.group(1)) >= 0.9 * int(joined.group(2)), proc.stderr
    stacks = folded_samples(trace)
    with_kernel = [s for s in stacks if "<module>;read_zeros" in s and "do_syscall_64" in s]
    assert with_kernel, stacks.most_common(5)


def test_from_start_waits_for_the_sampler(tmp_path: Path) -> None:
    """--kernel-stacks-from-start: the target starts once the sampler is attached, so even
    a program shorter than the compile has its kernel-mode samples, and nothing is said
    unsampled."""
    assert os.geteuid() == 0, "CI runs as root: the kernel-mode sampler needs eBPF"
    trace = tmp_path / "dd.perfetto-trace"
    dd = ["dd", "if=/dev/zero", "of=/dev/null", "bs=4M", "count=400"]
    proc = run_cli("record", "--no-gpu", "--kernel-stacks-from-start", "-o", trace, "--", *dd)
    assert proc.returncode == 0, proc.stderr
    _quiet(proc.stderr)
    assert "unsampled" not in proc.stderr, proc.stderr
    joined = re.search(r"(\d+) with kernel frames \(of (\d+) eBPF", proc.stderr)
    assert joined and int(joined.group(2)) > 0, proc.stderr
