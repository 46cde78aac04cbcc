"""A run's private directories are removed at exit by one callback that notes a quitting
signal instead of dying inside the removal: a Ctrl-C arriving then, after record had written
its trace, printed a KeyboardInterrupt traceback from inside the atexit callback
(tests/faults/test_record_signals caught it once in a full run).  The process still ends
as the signal says (128 + N), every directory removed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

_SCRIPT = """
import os, shutil, signal, sys
from pathlib import Path
from collector import files
real = shutil.rmtree
signum = int(sys.argv[1])
def rmtree(path, ignore_errors=False):
    if signum:
        os.kill(os.getpid(), signum)  # the signal arrives in the middle of the removal
    real(path, ignore_errors=ignore_errors)
files.shutil.rmtree = rmtree
for name in sys.argv[2:]:
    path = Path(name)
    (path / "sub").mkdir(parents=True)
    files.remove_tree_at_exit(path)
print("done", flush=True)
raise SystemExit(3)
"""


def _run(tmp_path: Path, signum: int) -> tuple[subprocess.CompletedProcess[str], list[Path]]:
    dirs = [tmp_path / "lib", tmp_path / "cache"]
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT, str(signum), *map(str, dirs)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
    )
    return run, dirs


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_removal_ends_the_process_as_a_signal(
    tmp_path: Path, signum: int
) -> None:
    run, dirs = _run(tmp_path, signum)
    assert "Traceback" not in run.stderr and "Exception ignored" not in run.stderr, run.stderr
    assert run.returncode == 128 + signum, run.stderr
    assert run.stdout == "done\n"
    assert not any(d.exists() for d in dirs)


def test_without_a_signal_the_status_is_the_commands(tmp_path: Path) -> None:
    run, dirs = _run(tmp_path, 0)
    assert run.returncode == 3 and not run.stderr, run.stderr
    assert not any(d.exists() for d in dirs)
