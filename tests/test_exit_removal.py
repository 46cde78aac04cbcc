"""A run's private directories are removed at exit with the quitting signals ignored: a
Ctrl-C arriving during that removal, after record had written its trace, printed a
KeyboardInterrupt traceback from inside the atexit callback (tests/faults/test_record_signals
caught it once in a full run)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from collector import files

from .conftest import REPO


def test_a_signal_during_the_removal_is_ignored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doomed = tmp_path / "run"
    (doomed / "sub").mkdir(parents=True)
    (doomed / "sub" / "lib.so").write_bytes(b"x")
    real_rmtree = shutil.rmtree

    def interrupted_rmtree(path: Path, ignore_errors: bool = False) -> None:
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the removal
        real_rmtree(path, ignore_errors=ignore_errors)

    monkeypatch.setattr(files.shutil, "rmtree", interrupted_rmtree)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    try:
        files.remove_tree_quietly(doomed)  # no KeyboardInterrupt
    finally:
        for s, handler in saved.items():
            signal.signal(s, handler)
    assert not doomed.exists()


def test_the_exit_removes_the_directory_without_a_traceback(tmp_path: Path) -> None:
    """In a real process: SIGINT to itself while its exit removes the directory."""
    doomed = tmp_path / "run"
    script = f"""
import os, shutil, signal
from pathlib import Path
from collector import files
real = shutil.rmtree
def rmtree(path, ignore_errors=False):
    os.kill(os.getpid(), signal.SIGINT)
    real(path, ignore_errors=ignore_errors)
files.shutil.rmtree = rmtree
path = Path({str(doomed)!r})
(path / "sub").mkdir(parents=True)
files.remove_tree_at_exit(path)
raise SystemExit(3)
"""
    run = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    assert run.returncode == 3, run.stderr
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert not doomed.exists()
