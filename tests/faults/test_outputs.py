"""Issue 21, outputs: a planted name beside an output is never followed, an output never
replaces an input, an interrupted write leaves nothing, and convert's summary says the truth.

Plants are made in a fresh sticky world-writable directory (what /tmp is), by root here:
with fs.protected_symlinks on, the kernel would refuse root to follow another user's link
there, which hides the bug this guards against on machines where it is off.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ..conftest import EXAMPLE, REPO
from .support import assert_one_line_error, cli, entries, make_fifo

VICTIM = b"root's file: must survive\n"


def _writers(trace: Path, out: Path) -> dict[str, list[str | Path]]:
    """Each command that writes a file, writing `out`."""
    return {
        "convert": ["convert", EXAMPLE, "-o", out],
        "folded": ["folded", trace, "-o", out],
        "flamegraph": ["flamegraph", trace, "-o", out],
        "report": ["report", trace, "-o", out],
        "merge": ["merge", trace, "-o", out],
        "record": ["record", "--no-gpu", "-q", "-o", out, "--", "sh", "-c", "exit 0"],
    }


@pytest.mark.parametrize(
    "command", ["convert", "folded", "flamegraph", "report", "merge", "record"]
)
def test_a_planted_tmp_symlink_is_not_followed(
    command: str, example_trace: Path, sticky_dir: Path, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(VICTIM)
    out = sticky_dir / "run.pf"
    # Every name a writer might use for its temporary file, planted as a link to the victim.
    (sticky_dir / "run.pf.tmp").symlink_to(victim)
    proc = cli(*_writers(example_trace, out)[command])
    assert proc.returncode == 0, proc.stderr
    assert victim.read_bytes() == VICTIM
    assert out.is_file() and not out.is_symlink() and out.stat().st_size > 0
    # Nothing of ours left beside it (the plant is the planter's business).
    assert entries(sticky_dir) == ["run.pf", "run.pf.tmp"]


def test_a_planted_fifo_does_not_hang_convert(sticky_dir: Path) -> None:
    out = sticky_dir / "run.pf"
    make_fifo(sticky_dir / "run.pf.tmp")
    try:
        proc = cli("convert", EXAMPLE, "-o", out, "-q", timeout=120)
    except subprocess.TimeoutExpired:
        pytest.fail("convert blocked on a FIFO planted beside its output")
    assert proc.returncode == 0, proc.stderr
    assert out.is_file() and out.stat().st_size > 0


@pytest.mark.parametrize("command", ["folded", "flamegraph", "report"])
def test_an_output_that_is_the_input_is_refused(
    command: str, example_trace: Path, tmp_path: Path
) -> None:
    trace = tmp_path / "x.pftrace"
    shutil.copy(example_trace, trace)
    before = trace.read_bytes()
    proc = cli(*_writers(trace, trace)[command])
    assert_one_line_error(proc, "input")
    assert proc.returncode == 2
    assert trace.read_bytes() == before
    assert entries(tmp_path) == ["x.pftrace"]


def test_convert_to_an_existing_directory_is_refused_up_front(tmp_path: Path) -> None:
    target = tmp_path / "out.pftrace"
    target.mkdir()
    proc = cli("convert", EXAMPLE, "-o", target)
    assert_one_line_error(proc, "is a directory")
    assert proc.returncode == 2
    assert entries(tmp_path) == ["out.pftrace"] and entries(target) == []


def _big_kineto(path: Path, copies: int) -> Path:
    """The example trace's events `copies` times over, each copy later in time (a
    conversion that takes seconds, long enough to be stopped in the middle)."""
    with gzip.open(EXAMPLE, "rt") as f:
        doc = json.load(f)
    events = doc["traceEvents"]
    span = max(float(e.get("ts", 0)) + float(e.get("dur", 0)) for e in events) + 1000
    out_events = []
    for i in range(copies):
        for e in events:
            c = dict(e)
            if "ts" in c:
                c["ts"] = float(c["ts"]) + i * span
            out_events.append(c)
    doc["traceEvents"] = out_events
    path.write_text(json.dumps(doc))
    return path


def test_sigterm_during_convert_leaves_nothing(tmp_path: Path) -> None:
    src = _big_kineto(tmp_path / "big.json", 40)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "convert", src, "-o", out_dir / "big.pftrace"],
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while not any(out_dir.iterdir()):  # the temporary file: the trace is being written
            assert proc.poll() is None, "convert ended before it could be stopped"
            assert time.monotonic() < deadline
            time.sleep(0.005)
        os.kill(proc.pid, signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "Traceback" not in stderr, stderr
    assert entries(out_dir) == [], "a stopped convert left a partial file"


def test_convert_summary_says_larger_when_the_output_is_larger(tmp_path: Path) -> None:
    src = tmp_path / "tiny.json"
    src.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "step", "pid": 1, "tid": 1, "ts": 1, "dur": 5, "cat": "cpu_op"}
    ]}))  # fmt: skip
    out = tmp_path / "tiny.pftrace"
    proc = cli("convert", src, "-o", out, "--no-progress", env={"COLUMNS": "500"})
    assert proc.returncode == 0, proc.stderr
    assert out.stat().st_size > src.stat().st_size
    ratio = out.stat().st_size / src.stat().st_size
    assert f"{ratio:.1f}x larger than" in proc.stderr, proc.stderr
    assert "smaller" not in proc.stderr
