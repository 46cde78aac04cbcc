"""Issue 34 L3/L4: a signal at any moment of `record` (while the target runs, as it exits,
while record stops its sources, while it writes the trace) ends in a complete trace or in
kept streams, with a non-zero exit and, for kept streams, one line saying how to finish;
never a traceback, never exit 0 without a trace, never the recording gone.

Each case is a real record (GPU streams from the fake CUPTI, the in-process CPU sampler and,
as root, the eBPF kernel-mode sampler) of a small program that leaves a file just before it
exits, so that the signal is sent at a known moment after the target's end."""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace
from tests.fake_cupti.build import FakeCupti

from ..conftest import REPO
from .support import cli, entries

BUSY = "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done"
# "$0": the fake CUDA program, "$1": a file made after its GPU work, "$2": one made just
# before the target exits (when `$3` is "run", the target runs until a signal stops it).
# 30,000 launches: record then needs ~0.5 s after the target's end (on this 2-core VM) to
# stop its sources and write the trace, so "0.15 s after the end" is still record at work
# (with 3,000 it had finished by then on a faster machine, and the signal came too late).
SCRIPT = '"$0" 30000 0; touch "$1"; ' + BUSY + '; [ "$3" = run ] && while :; do :; done; touch "$2"'
NOISE = ("Traceback", "Exception ignored", "Failed to detach", "No ring buffers")


def _wait_for(condition, what: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"record ended before {what}"
        assert time.monotonic() < deadline, f"never {what}"
        time.sleep(0.001)


@pytest.mark.parametrize(
    ("moment", "signum"),
    [
        ("running", signal.SIGINT),
        ("exit+0.0", signal.SIGTERM),
        ("exit+0.05", signal.SIGINT),
        ("exit+0.1", signal.SIGINT),
        ("exit+0.15", signal.SIGTERM),
        ("writing", signal.SIGTERM),
        ("writing", signal.SIGINT),
    ],
)
def test_a_signal_at_any_moment_leaves_a_trace_or_kept_streams(
    fake: FakeCupti, tmp_path: Path, run_tmpdir: Path, moment: str, signum: int
) -> None:
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    out = out_dir / "rec.pftrace"
    gpu_done, ended = tmp_path / "gpu_done", tmp_path / "ended"
    until = "run" if moment == "running" else "end"
    env = {**os.environ, "TMPDIR": str(run_tmpdir), "XPU_PERF_INJECT_LIB": str(fake.injection)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "record", "-o", out, "--",
         "sh", "-c", SCRIPT, fake.app, gpu_done, ended, until],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        if moment == "running":
            _wait_for(gpu_done.exists, "the target's GPU work was done", proc)
            time.sleep(0.5)
        elif moment.startswith("exit+"):
            _wait_for(ended.exists, "the target ended", proc)
            time.sleep(float(moment.removeprefix("exit+")))
        else:  # the trace's temporary file: record is writing it
            _wait_for(lambda: any(out_dir.iterdir()), "the trace was being written", proc)
        # A record that had already ended gets no signal: its exit 0 would say nothing.
        assert proc.poll() is None, f"record ended before the moment {moment}"
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for noise in NOISE:
        assert noise not in stderr, stderr
    assert proc.returncode != 0, f"exit 0 after a signal:\n{stderr}"
    hint = re.findall(r"xpu-perf record --from-streams (\S+) -o (\S+)$", stderr, re.M)
    if out.exists():  # a complete trace, and nothing else left behind
        assert not hint, stderr
        assert entries(out_dir) == ["rec.pftrace"]
        assert entries(run_tmpdir) == []
        finished = out
    else:  # the streams kept, said in one line with the command that finishes
        assert entries(out_dir) == [], "a partial trace was left"
        assert len(hint) == 1, stderr
        assert len([line for line in stderr.splitlines() if "--from-streams" in line]) == 1
        kept = Path(hint[0][0])
        assert hint[0][1] == str(out) and kept.is_dir()
        done = cli("record", "--from-streams", kept, "-o", out, env={"TMPDIR": str(run_tmpdir)})
        assert done.returncode == 0, done.stderr
        assert not kept.exists()
        finished = out
    with open_trace(finished) as trace:
        assert trace.scalar("select count(*) from slice where category = 'kernel'") > 0
        assert trace.scalar("select count(*) from perf_sample") > 0


def test_a_signal_after_the_trace_is_written_exits_non_zero_with_the_trace_kept(
    fake: FakeCupti, tmp_path: Path, run_tmpdir: Path
) -> None:
    """The last moment: the trace is in place and record says its summary.  Record is held
    there for sure by its stderr, a pipe the test fills once the target has ended (the
    target shares it, so not before): the summary's first line blocks until the test reads.
    The signal then is noted, the summary finishes with a line saying the trace is
    complete, and the exit is 128+N, never 0."""
    out = tmp_path / "rec.pftrace"
    gpu_done, ended = tmp_path / "gpu_done", tmp_path / "ended"
    env = {**os.environ, "TMPDIR": str(run_tmpdir), "XPU_PERF_INJECT_LIB": str(fake.injection)}
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector.cli", "record", "-o", out, "--",
             "sh", "-c", SCRIPT, fake.app, gpu_done, ended, "end"],
            cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=write_end,
        )  # fmt: skip
        try:
            _wait_for(ended.exists, "the target ended", proc)
            os.set_blocking(write_end, False)
            filler = 0
            while True:
                try:
                    filler += os.write(write_end, b"." * 512)
                except OSError as exc:
                    assert exc.errno == errno.EAGAIN, exc
                    break
            os.close(write_end)
            write_end = -1
            _wait_for(out.exists, "the trace was in place", proc)
            assert proc.poll() is None, "record ended with its stderr full"
            proc.send_signal(signal.SIGTERM)
            said = b""
            while chunk := os.read(read_end, 1 << 16):
                said += chunk
            proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    finally:
        for fd in (read_end, write_end):
            if fd >= 0:
                os.close(fd)
    stderr = said[filler:].decode()
    assert said[:filler] == b"." * filler
    for noise in NOISE:
        assert noise not in stderr, stderr
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert f"stopped by SIGTERM; the trace {out} is complete" in stderr, stderr
    assert "--from-streams" not in stderr
    assert entries(run_tmpdir) == []
    with open_trace(out) as trace:
        assert trace.scalar("select count(*) from slice where category = 'kernel'") > 0


def test_a_signal_with_nothing_on_disk_to_keep_finishes_the_trace(tmp_path: Path) -> None:
    """The eBPF CPU sampler holds its samples in record's memory: no streams to keep, so a
    signal as the target exits finishes the trace (then exits 128+N) instead of losing it."""
    out = tmp_path / "rec.pftrace"
    ended = tmp_path / "ended"
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "--cpu-sampler", "ebpf",
         "-o", out, "--", "sh", "-c", BUSY + '; touch "$0"', ended],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _wait_for(ended.exists, "the target ended", proc)
        time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    for noise in NOISE:
        assert noise not in stderr, stderr
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert f"stopped by SIGTERM; the trace {out} is complete" in stderr
    with open_trace(out) as trace:
        assert trace.scalar("select count(*) from perf_sample") > 0
