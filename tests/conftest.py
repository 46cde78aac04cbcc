"""Shared fixtures: the repo's bundled example traces, a CLI runner, the fake CUPTI build."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from collector.inject_build import BuildError

from .fake_cupti.build import FakeCupti, build_fake

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "bench" / "data" / "example_kineto.json.gz"

# What set-up builds into the cache (scripts/setup.sh), which a session's cache starts with.
BUILT = ("wasm", "sampler", "cupti_inject", "cpython")
_session_cache: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The suite looks at hundreds of traces: their answers and engine snapshots go to a
    cache of the session's own, not the user's (whose 32 traces' answers and 4 GiB of
    snapshots they would push out).  It starts with hard links to what set-up built in the
    user's cache (regular files of the same owner, as the cache's checks want; a build
    replaces its file, so a link never writes through)."""
    global _session_cache
    from collector import cache_trust

    user = cache_trust.cache_root()
    user.mkdir(parents=True, exist_ok=True)
    _session_cache = Path(tempfile.mkdtemp(prefix="xpu-perf-tests-", dir=user))
    (_session_cache / "xpu-perf").mkdir(mode=0o700)
    for name in BUILT:
        built = user / "xpu-perf" / name
        if built.is_dir():
            shutil.copytree(
                built, _session_cache / "xpu-perf" / name, symlinks=True, copy_function=_link
            )
    os.environ["XDG_CACHE_HOME"] = str(_session_cache)  # run_cli's children too


def pytest_unconfigure(config: pytest.Config) -> None:
    if _session_cache is not None:
        shutil.rmtree(_session_cache, ignore_errors=True)


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:  # another file system, or links refused: a copy
        shutil.copy2(src, dst)


def run_cli(*args: str | Path, check: bool = False) -> subprocess.CompletedProcess[str]:
    """Run the real `xpu-perf` entry point in a subprocess."""
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"xpu-perf {args} failed: {proc.stderr}")
    return proc


def load_kineto(path: Path) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def example_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("convert") / "example.perfetto-trace"
    run_cli("convert", EXAMPLE, "-o", out, check=True)
    return out


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeCupti:
    """The fake CUPTI and its test application, built once per module that asks."""
    try:
        return build_fake(tmp_path_factory.mktemp("fake_cupti"))
    except (BuildError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot build the fake CUPTI: {exc}")
