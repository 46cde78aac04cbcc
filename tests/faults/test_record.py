"""Issue 21, `record`: its output checked before the target runs, a bad target said before
anything is made, the target never outliving a killed record, no directory left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import REPO
from .support import assert_one_line_error, cli, entries, kill_quietly, require_root


def _marker_target(marker: Path) -> list[str | Path]:
    """A target whose run leaves `marker`: it must not run when the output is bad."""
    return ["--", "sh", "-c", 'touch "$0"', marker]


def test_record_into_an_existing_directory_fails_before_the_target_runs(tmp_path: Path):
    out = tmp_path / "out.pftrace"
    out.mkdir()
    marker = tmp_path / "target_ran"
    proc = cli("record", "--no-gpu", "-o", out, *_marker_target(marker))
    assert_one_line_error(proc, "is a directory")
    assert proc.returncode == 2
    assert not marker.exists()
    assert entries(out) == []


def test_record_into_a_read_only_directory_fails_before_the_target_runs(tmp_path: Path):
    require_root()
    ro = tmp_path / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(ro)], check=True)
    try:
        marker = tmp_path / "target_ran"
        proc = cli("record", "--no-gpu", "-o", ro / "out.pftrace", *_marker_target(marker))
        assert_one_line_error(proc, "cannot write", str(ro))
        assert not marker.exists()
    finally:
        subprocess.run(["umount", "-l", str(ro)], check=False)


@pytest.mark.parametrize("kind", ["missing", "not_executable", "directory"])
def test_a_target_that_cannot_run_leaves_nothing(kind: str, tmp_path: Path, run_tmpdir: Path):
    target = tmp_path / "target"
    if kind == "not_executable":
        target.write_text("#!/bin/sh\nexit 0\n")
        target.chmod(0o644)
    elif kind == "directory":
        target.mkdir()
    out = tmp_path / "out.pftrace"
    proc = cli("record", "--no-gpu", "-o", out, "--", target, env={"TMPDIR": str(run_tmpdir)})
    assert_one_line_error(proc, "cannot run", str(target))
    assert not out.exists()
    assert entries(run_tmpdir) == []  # no empty xpu-perf-cpu-* (or any) directory


def test_a_killed_record_takes_its_target_along(tmp_path: Path, run_tmpdir: Path) -> None:
    pid_file = tmp_path / "target.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "-q",
         "-o", tmp_path / "out.pftrace", "--",
         "sh", "-c", 'echo $$ > "$0"; exec sleep 300', pid_file],
        cwd=REPO, env={**os.environ, "TMPDIR": str(run_tmpdir)},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    target = 0
    try:
        deadline = time.monotonic() + 120
        while not (pid_file.exists() and pid_file.read_text().strip()):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        target = int(pid_file.read_text())
        time.sleep(0.3)  # the target is sleep now (exec)
        os.kill(proc.pid, signal.SIGKILL)  # no handler of record runs
        proc.wait(timeout=30)
        deadline = time.monotonic() + 10
        while _alive(target) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(target), "the target outlived the killed record"
    finally:
        if proc.poll() is None:
            proc.kill()
        if target:
            kill_quietly(target)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_an_untrusted_cache_leaves_no_rebuild_directory(tmp_path: Path, run_tmpdir: Path):
    """A cache others can write is not used: record builds in a private directory, and
    that directory goes when record ends (one per run would pile up)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)  # writable by others: untrusted
    out = tmp_path / "out.pftrace"
    env = {"XPU_PERF_CACHE": str(cache), "TMPDIR": str(run_tmpdir)}
    proc = cli("record", "--no-gpu", "-q", "-o", out, "--", "sh", "-c", "exit 0", env=env)
    assert proc.returncode == 0, proc.stderr
    assert "not using the cached" in proc.stderr  # the private build did happen
    assert out.is_file()
    assert entries(run_tmpdir) == []
