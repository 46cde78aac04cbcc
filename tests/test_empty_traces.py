"""Traces with little or nothing recorded keep their metadata and have no error stats.

On a machine that never suspended, BOOTTIME and MONOTONIC are equal, and the clock
snapshot reads BOOTTIME first, so MONOTONIC 0 converts to a slightly negative BOOTTIME time:
a metadata instant stamped 0 was dropped (`trace_sorter_negative_timestamp_dropped`).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
from exporters.perfetto.writer import TraceWriter
from tests.native.bpf_harness import requires_bpf

from .conftest import REPO, run_cli

RECORD_NO_GPU = [sys.executable, "-m", "collector.cli", "record", "--no-gpu"]


def assert_metadata_kept(path: Path) -> dict[str, object]:
    with open_trace(path) as t:
        errors = t.query(
            "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
        )
        assert errors == []
        load_views(t)
        rows = t.query("select key, display_value from xpu_metadata")
    meta = {r["key"]: r["display_value"] for r in rows}
    assert meta.get("tool") == "xpu-perf", meta
    return meta


@pytest.mark.parametrize(
    "clock", [pb.BUILTIN_CLOCK_MONOTONIC, pb.BUILTIN_CLOCK_BOOTTIME], ids=["monotonic", "boottime"]
)
def test_empty_trace_keeps_metadata(tmp_path: Path, clock: int) -> None:
    out = tmp_path / "empty.perfetto-trace"
    with TraceWriter(out, clock_id=clock) as w:
        w.set_metadata("answer", 42)
    meta = assert_metadata_kept(out)
    assert meta["answer"] == "42"


def test_monotonic_trace_with_only_a_process_keeps_metadata(tmp_path: Path) -> None:
    out = tmp_path / "proc.perfetto-trace"
    with TraceWriter(out, clock_id=pb.BUILTIN_CLOCK_MONOTONIC) as w:
        w.producer("p").write(model.ProcessInfo(1234, "sleep"))
    assert_metadata_kept(out)


@requires_bpf
def test_record_sleep_keeps_metadata(tmp_path: Path) -> None:
    out = tmp_path / "sleep.perfetto-trace"
    proc = run_cli("record", "--no-gpu", "-o", out, "--", "sleep", "1")
    assert proc.returncode == 0, proc.stderr
    meta = assert_metadata_kept(out)
    assert any(key.endswith("cpu_samples") for key in meta), meta  # the sampler's counters


@requires_bpf
def test_record_interrupted_in_first_second_keeps_metadata(tmp_path: Path) -> None:
    out = tmp_path / "int.perfetto-trace"
    proc = subprocess.Popen(
        [*RECORD_NO_GPU, "-o", str(out), "--", "sleep", "30"],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    # SIGINT within the target's first second (once it runs: `record` starts its sources
    # first, which takes a while).
    _wait_for_child(proc.pid)
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGINT, stderr
    assert "Traceback" not in stderr
    assert_metadata_kept(out)


@requires_bpf
def test_record_interrupted_before_the_target_runs_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "early.perfetto-trace"
    proc = subprocess.Popen(
        [*RECORD_NO_GPU, "-o", str(out), "--", "sleep", "30"],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(0.15)  # still importing or starting the sampler (the target starts at ~0.5 s)
    assert not any(_comm(child) == "sleep" for child in _children(proc.pid))
    os.kill(proc.pid, signal.SIGINT)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "Traceback" not in stderr, stderr
    assert len(stderr.strip().splitlines()) == 1, stderr
    assert list(tmp_path.iterdir()) == []


def _children(pid: int) -> list[str]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return path.read_text().split() if path.exists() else []


def _wait_for_child(pid: int, timeout: float = 60.0) -> None:
    """Until `record` runs its target (`sleep`; imports may run helpers such as ldconfig)."""
    deadline = time.monotonic() + timeout
    while not any(_comm(child) == "sleep" for child in _children(pid)):
        assert time.monotonic() < deadline, "record never started its target"
        time.sleep(0.02)


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@requires_bpf
def test_record_of_a_missing_command_fails_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "missing.perfetto-trace"
    proc = run_cli("record", "--no-gpu", "-o", out, "--", "/nonexistent/xpu-perf-no-such-cmd")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("xpu-perf record: error: cannot run")
    assert list(tmp_path.iterdir()) == []  # no trace, no .tmp
