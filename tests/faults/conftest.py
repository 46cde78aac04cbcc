"""Fixtures of the fault tests (issue 21): directories other users reach, a full disk."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from .support import require_root


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory under /tmp every user can enter (pytest's tmp_path is root's alone)."""
    path = Path(tempfile.mkdtemp(prefix="xpu-perf-faults-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def sticky_dir(shared_dir: Path) -> Path:
    """A fresh world-writable sticky directory (like /tmp): where other users plant names."""
    sticky = shared_dir / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    return sticky


@pytest.fixture
def run_tmpdir(tmp_path: Path) -> Path:
    """TMPDIR for the command under test: what it leaves in its temp directory is seen,
    and nobody else's files (other tests, other users) are."""
    path = tmp_path / "run_tmp"
    path.mkdir()
    return path


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A 256 KiB tmpfs, mounted by the test and filled up (a file takes every block), so
    the next write gets ENOSPC; unmounted afterwards."""
    require_root()
    mount = tmp_path / "full"
    mount.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], check=True)
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError:
            pass  # ENOSPC: full
        finally:
            os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
