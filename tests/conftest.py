"""Shared fixtures: the repo's bundled example traces, a CLI runner, the fake CUPTI build."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from collector.inject_build import BuildError

from .fake_cupti.build import FakeCupti, build_fake

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "bench" / "data" / "example_kineto.json.gz"


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
