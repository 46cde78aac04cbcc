"""Issue 34 L5: what the libraries cannot write is counted, whatever the write error.  The
target here caps its own file size (RLIMIT_FSIZE, SIGXFSZ ignored: every later write of its
stream fails with EFBIG, the first one half way) on a disk with room: the waits it makes
after are not in the trace, and record says exactly how many, from the count the library
rewrote in place in the block it wrote first (a write error that is no full disk)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from exporters.perfetto.engine.trace_processor import open_trace

from ..conftest import REPO
from ..fake_cupti.build import FakeCupti

SLEEPS = 40
# 0.3 s of CPU (the library's first flushes write the process and its names), then a file
# size cap just past what its stream holds, then SLEEPS sleeps of 10 ms over a 5 ms threshold.
CAPPED = f"""
import glob, os, resource, signal, time
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
end = time.process_time() + 0.3
while time.process_time() < end: pass
out = os.environ["XPU_PERF_CPU_OUT_DIR"]
stream, = glob.glob(f"{{out}}/**/cpu-{{os.getpid()}}.xpstream", recursive=True)
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(stream) + 100, resource.RLIM_INFINITY))
for _ in range({SLEEPS}):
    end = time.process_time() + 0.005
    while time.process_time() < end: pass
    time.sleep(0.01)
"""


def test_waits_a_write_error_cost_are_counted_exactly(run_tmpdir: Path, tmp_path: Path) -> None:
    out = tmp_path / "rec.pftrace"
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "--no-kernel-stacks",
         "--wait-threshold", "5000", "-o", out, "--", sys.executable, "-c", CAPPED],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "TMPDIR": str(run_tmpdir)},
        timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as trace:
        # Only the sleeps: its start-up may block longer too (a read from a cold cache),
        # before the cap, where nothing is lost.
        kept = trace.scalar(
            "select count(*) from slice where category = 'wait' and name glob '*sleep*'"
        )
        lost = trace.scalar("select int_value from args where key = 'debug.cpu_unwritten_waits'")
        samples = trace.scalar(
            "select int_value from args where key = 'debug.cpu_unwritten_cpu_samples'"
        )
    assert lost > 0, proc.stderr
    assert kept + lost == SLEEPS, (kept, lost, proc.stderr)
    said = [line for line in proc.stderr.splitlines() if "could not be written in full" in line]
    assert len(said) == 1, proc.stderr
    assert f"{samples} CPU samples, {lost} waits, 0 GPU records are not in the trace" in said[0]
    assert "was full" not in proc.stderr
    # Its final flush ran: its lost final counters are no kill, and the threshold is record's.
    assert "(killed)" not in proc.stderr
    assert "ended without their final flush (their final counters could not be written" in (
        proc.stderr
    )
    waits_line = [line for line in proc.stderr.splitlines() if "blocked calls" in line]
    assert "blocked calls of 5.0 ms or more" in waits_line[0], proc.stderr
    assert f"unwritten={lost}" in waits_line[0], proc.stderr


LAUNCHES = 100
# fake_app (tests/fake_cupti): 2*LAUNCHES (main + worker) + 10 driver-only + 5 graph + 5 after
# fork, all in the parent (its forked child does CPU work only).
KERNELS = 2 * LAUNCHES + 10 + 5 + 5


def test_gpu_records_a_write_error_cost_are_counted_exactly(
    fake: FakeCupti, run_tmpdir: Path, tmp_path: Path
) -> None:
    """The injection library (the same stream writer) under a file size cap from its start:
    room for its header, its UNWRITTEN block and a few chunks, not for its GPU records.  The
    kernels in the trace and those said lost add up to those the fake CUPTI delivered."""
    out = tmp_path / "rec.pftrace"
    # SIGXFSZ ignored (kept across exec): the writes fail with EFBIG instead of killing it.
    capped = f"trap '' XFSZ; exec prlimit --fsize=20480 {fake.app} {LAUNCHES} 3"
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--no-cpu", "-o", out, "--",
         "sh", "-c", capped],
        capture_output=True, text=True, cwd=REPO, timeout=300,
        env={**os.environ, "TMPDIR": str(run_tmpdir), "XPU_PERF_INJECT_LIB": str(fake.injection),
             "FAKE_CUPTI_RECORDS_PER_BUFFER": "64"},
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # the exit code fake_app was asked for
    with open_trace(out) as trace:
        kept = trace.scalar("select count(*) from slice where category = 'kernel'")
        lost = trace.scalar(
            "select int_value from args where key = 'debug.cupti_unwritten_rows_kernel'"
        )
        records = trace.scalar(
            "select int_value from args where key = 'debug.cupti_unwritten_gpu_records'"
        )
    assert kept > 0 and lost is not None and lost > 0, (kept, lost, proc.stderr)
    assert kept + lost == KERNELS, (kept, lost, proc.stderr)
    said = [line for line in proc.stderr.splitlines() if "could not be written in full" in line]
    assert len(said) == 1 and f"{records} GPU records are not in the trace" in said[0], said
    assert records >= lost
