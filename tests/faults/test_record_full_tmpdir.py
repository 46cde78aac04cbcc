"""Issue 34 L5/W1: a full TMPDIR during `record`.  The streams of the target's processes
go there: when it fills up their writes fail, and so does the final write of the counters
that would have said so.  Record lost every sample of a run without a word ("lost:
transport=0", "wrote"), or blamed a kill; now it says the file system was full, from when,
which streams it cut, and the trace's metadata says so too.  A TMPDIR too small for even the
libraries the target loads was reported against the library's cache path."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from collector.inject_build import build_sampler
from collector.recording.python_names import HOOK_DIRECTORY
from exporters.perfetto.engine.trace_processor import open_trace

from ..conftest import REPO
from .support import assert_one_line_error, entries, require_root

PAGE = 4096
BUSY = "i=0; while [ $i -lt 1500000 ]; do i=$((i+1)); done"  # about a second of CPU


def _pages(path: Path) -> int:
    """What `path` (a file, or a directory's files) takes on a tmpfs, in bytes."""
    files = [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return sum(math.ceil(p.stat().st_size / PAGE) * PAGE for p in files)


def _tmpfs(mount: Path, size: int) -> Iterator[Path]:
    require_root()
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], check=True)
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs with room for the libraries the target loads (as root, copied into TMPDIR)
    and 8 KiB more: the streams fill it within the first second of the run."""
    room = _pages(build_sampler()) + _pages(HOOK_DIRECTORY) + 2 * PAGE
    yield from _tmpfs(tmp_path / "small", room)


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """Room for Python's check that TMPDIR is writable (else it quietly takes /tmp), not
    for the libraries."""
    yield from _tmpfs(tmp_path / "tiny", 16 * PAGE)


def _record(out: Path, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "--no-kernel-stacks",
         "-o", out, "--", "sh", "-c", BUSY],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "TMPDIR": str(tmpdir)},
        timeout=120,
    )  # fmt: skip


def test_a_tmpdir_that_fills_up_is_said_not_a_silent_loss(
    small_tmpfs: Path, tmp_path: Path
) -> None:
    out = tmp_path / "rec.pftrace"
    proc = _record(out, small_tmpfs)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    full = [line for line in proc.stderr.splitlines() if "file system of the streams" in line]
    assert len(full) == 1, proc.stderr
    assert f"the file system of the streams ({small_tmpfs}, TMPDIR)" in full[0]
    assert "1 CPU streams stop there" in full[0] and "TMPDIR" in full[0]
    assert "(killed)" not in proc.stderr  # not blamed on a kill
    with open_trace(out) as trace:
        assert trace.scalar("select int_value from args where key = 'debug.disk_full'") == 1
    assert entries(small_tmpfs) == []  # the run's directories went with it


# A program whose waits are known exactly: SLEEPS sleeps of 10 ms (over a 5 ms threshold; its
# start-up blocks in nothing that long), each after ~20 ms of CPU, whose samples fill the
# disk.  The CPU is a fixed count of Python additions, in user mode: the in-process sampler
# counts user-mode CPU time (kernel mode is the eBPF sampler's), and a loop reading
# time.process_time() spent ~75% of its time in that syscall, so two runs of it made 26 and
# 36 samples of 1.2 s of CPU.
SLEEPS = 60
SLEEPER = (
    "import time\n"
    f"for _ in range({SLEEPS}):\n"
    "    x = 0\n"
    "    for i in range(400_000): x += i\n"
    "    time.sleep(0.01)\n"
)


def _record_sleeper(out: Path, tmpdir: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "--no-kernel-stacks",
         "--wait-threshold", "5000", "-o", out, "--", sys.executable, "-c", SLEEPER],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "TMPDIR": str(tmpdir)},
        timeout=120,
    )  # fmt: skip


def _counts(trace_path: Path) -> dict[str, int]:
    """The trace's waits and samples, and what its metadata says was not written."""
    with open_trace(trace_path) as trace:

        def meta(key: str) -> int:
            return trace.scalar(f"select int_value from args where key = 'debug.{key}'")

        return {
            # The sleeps: start-up may block longer too (a read from a cold cache), kept.
            "waits": trace.scalar(
                "select count(*) from slice where category = 'wait' and name glob '*sleep*'"
            ),
            "samples": trace.scalar("select count(*) from perf_sample"),
            "lost_waits": meta("cpu_unwritten_waits"),
            "lost_samples": meta("cpu_unwritten_cpu_samples"),
        }


def test_a_full_tmpdir_says_how_many_waits_and_samples_it_cost(
    small_tmpfs: Path, run_tmpdir: Path, tmp_path: Path
) -> None:
    """The library counts what it could not write and rewrites that count in place, into the
    block it wrote first: the number said is exactly the waits made minus the waits kept, and
    the samples kept and lost are about what the same program makes with room."""
    proc = _record_sleeper(tmp_path / "full.pftrace", small_tmpfs)
    assert proc.returncode == 0, proc.stderr
    full = _counts(tmp_path / "full.pftrace")
    assert full["lost_waits"] > 0 and full["lost_samples"] > 0, (full, proc.stderr)
    assert full["waits"] + full["lost_waits"] == SLEEPS, full
    said = [line for line in proc.stderr.splitlines() if "lost to the full disk" in line]
    assert len(said) == 1, proc.stderr
    assert (
        f"lost to the full disk: {full['lost_samples']} CPU samples, {full['lost_waits']} "
        "waits, 0 GPU records" in said[0]
    )
    roomy = _record_sleeper(tmp_path / "room.pftrace", run_tmpdir)
    assert roomy.returncode == 0, roomy.stderr
    room = _counts(tmp_path / "room.pftrace")
    assert room["waits"] == SLEEPS and room["lost_waits"] == room["lost_samples"] == 0, room
    made = full["samples"] + full["lost_samples"]
    # CPU-time timers of two runs of the same ~1.2 s of user CPU: within a third.
    assert abs(made - room["samples"]) <= max(room["samples"] / 3, 5), (full, room)


def test_a_tmpdir_with_room_says_nothing_of_it(tmp_path: Path, run_tmpdir: Path) -> None:
    out = tmp_path / "rec.pftrace"
    proc = _record(out, run_tmpdir)
    assert proc.returncode == 0, proc.stderr
    assert "was full" not in proc.stderr
    with open_trace(out) as trace:
        assert trace.scalar("select int_value from args where key = 'debug.disk_full'") == 0
        assert trace.scalar("select count(*) from perf_sample") > 0
        for key in ("cpu_unwritten_cpu_samples", "cpu_unwritten_waits"):
            assert trace.scalar(f"select int_value from args where key = 'debug.{key}'") == 0


def test_a_tmpdir_without_room_for_the_libraries_is_named(tiny_tmpfs: Path, tmp_path: Path):
    out = tmp_path / "rec.pftrace"
    proc = _record(out, tiny_tmpfs)
    assert_one_line_error(proc, str(tiny_tmpfs), "TMPDIR", "no space left")
    assert "/.cache/" not in proc.stderr
    assert not out.exists() and entries(tiny_tmpfs) == []
