"""What the target does to the native libraries must not lose a recording silently (issue 21):
`record` on targets that close or replace the libraries' descriptors, end through _exit or a
signal they send themselves, change user, or start children without the sampler library.
Each test reads back the trace `record` wrote (samples per process, the metadata) and its
summary; each failed on the commit before these fixes (8daab95)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import REPO, run_cli
from .fake_cupti.build import FakeCupti, cupti_headers

PYTHON = "/usr/bin/python3"
RECORD = (sys.executable, "-m", "collector.cli", "record")
# The in-process CPU sampler only (no kernel-mode eBPF sampler beside it).
CPU_ONLY = ("--no-gpu", "--no-kernel-stacks", "--freq", "999")
NOBODY = 65534
# burn(s): s seconds of the process's own CPU time, nearly all in user mode (the clock is
# read every 10,000 additions: reading it is a syscall, and the in-process sampler counts
# user-mode time only; a loop of clock reads made about 1 sample in 4 at 999 Hz).  The
# counts asked below are low all the same: zero is what the defects gave.
BURN = (
    "import time\n"
    "def burn(s):\n"
    "    end = time.process_time() + s\n"
    "    while time.process_time() < end:\n"
    "        for _ in range(10_000): pass\n"
)


def record_cpu(out: Path, *cmd: str | Path) -> subprocess.CompletedProcess[str]:
    """`record` with the in-process CPU sampler only."""
    return run_cli("record", *CPU_ONLY, "-o", out, "--", *cmd)


def samples_per_pid(trace: Path) -> dict[int, int]:
    with open_trace(trace) as t:
        rows = t.query(
            "select p.pid as pid, count(*) as n from perf_sample ps join thread using (utid) "
            "join process p using (upid) group by p.pid"
        )
    return {int(r["pid"]): int(r["n"]) for r in rows}


def metadata(trace: Path, key: str) -> int | str | None:
    with open_trace(trace) as t:
        return t.scalar(
            "select coalesce(a.int_value, a.string_value) from slice s join args a "
            "using (arg_set_id) where s.category = 'xpu_perf_metadata' "
            f"and a.key = 'debug.{key}'"
        )


def python_target(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "target.py"
    script.write_text(BURN + textwrap.dedent(body))
    return script


def test_closerange_keeps_the_channel(tmp_path: Path) -> None:
    """os.closerange(3, 65536) closes the stream and every perf clock: the stream is
    reopened by its path and the clocks restarted, and the metadata counts both."""
    script = python_target(tmp_path, "import os\nos.closerange(3, 1 << 16)\nburn(0.6)\n")
    out = tmp_path / "closed.perfetto-trace"
    proc = record_cpu(out, PYTHON, script)
    assert proc.returncode == 0, proc.stderr
    assert sum(samples_per_pid(out).values()) > 30, proc.stderr
    assert metadata(out, "cpu_streams_without_counters") == 0
    assert metadata(out, "cpu_transport_reopened") >= 1
    assert metadata(out, "cpu_clocks_restarted") >= 1
    assert "the target closed or replaced the sampler's descriptors" in proc.stderr


def test_dup2_over_the_streams_keeps_the_channel(tmp_path: Path) -> None:
    """dup2(/dev/null) over every descriptor of the sampler (its stream, found through
    /proc/self/fd, and its perf clocks): nothing goes to /dev/null unnoticed."""
    body = """
        import os
        null = os.open("/dev/null", os.O_WRONLY)
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.endswith(".xpstream") or "perf_event" in target:
                os.dup2(null, int(fd))
        burn(0.6)
        """
    out = tmp_path / "dup2.perfetto-trace"
    proc = record_cpu(out, PYTHON, python_target(tmp_path, body))
    assert proc.returncode == 0, proc.stderr
    assert sum(samples_per_pid(out).values()) > 30, proc.stderr
    assert metadata(out, "cpu_streams_without_counters") == 0
    assert metadata(out, "cpu_transport_reopened") >= 1


def test_forked_children_that_exit_deliver_their_samples(tmp_path: Path) -> None:
    """50 forked children that burn 50 ms and os._exit(0) (multiprocessing's and DataLoader
    workers' way out): each delivers its samples and its final counters."""
    body = """
        import os
        children = []
        for _ in range(50):
            pid = os.fork()
            if pid == 0:
                burn(0.05)
                os._exit(0)
            children.append(pid)
        for pid in children:
            os.waitpid(pid, 0)
        burn(0.1)
        """
    out = tmp_path / "forks.perfetto-trace"
    proc = record_cpu(out, PYTHON, python_target(tmp_path, body))
    assert proc.returncode == 0, proc.stderr
    per_pid = samples_per_pid(out)
    assert len(per_pid) >= 46, per_pid  # 51 processes; a child may finish between two ticks
    assert sum(per_pid.values()) >= 100, per_pid
    assert metadata(out, "cpu_streams_without_counters") == 0
    assert "ended without their final flush" not in proc.stderr


def test_python_stopped_by_sigint_is_not_called_killed(tmp_path: Path) -> None:
    """Ctrl-C on record: the Python target gets SIGINT, finalizes and re-raises SIGINT with
    the default action (kill(getpid(), SIGINT), which skips atexit).  Its final flush runs
    first, so it is not counted as killed, and its last samples are there."""
    body = "burn(0.3)\nprint('ready', flush=True)\nwhile True: burn(0.01)\n"
    script = python_target(tmp_path, body)
    out = tmp_path / "sigint.perfetto-trace"
    rec = subprocess.Popen(
        [*RECORD, *CPU_ONLY, "-o", str(out), "--", PYTHON, str(script)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert rec.stdout is not None and rec.stdout.readline().strip() == "ready"
    rec.send_signal(signal.SIGINT)
    _, stderr = rec.communicate(timeout=120)
    assert rec.returncode == 128 + signal.SIGINT, stderr
    assert "KeyboardInterrupt" in stderr
    assert metadata(out, "cpu_streams_without_counters") == 0, stderr
    assert "ended without their final flush" not in stderr
    assert sum(samples_per_pid(out).values()) > 0


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root")
def test_setpriv_target_runs_and_is_sampled(tmp_path: Path) -> None:
    """setpriv keeps its capabilities on its own thread (PR_SET_KEEPCAPS) across setresuid,
    then calls setresgid: glibc runs it on every thread and aborted (rc 134) when the
    sampler's threads, without those capabilities, failed.  Now the target's status passes
    through, and the python3 it becomes, uid 65534, is sampled: the library from the run's
    world-readable copy, the stream in the uid-65534 directory made for it while root."""
    out = tmp_path / "setpriv.perfetto-trace"
    proc = record_cpu(
        out,
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        PYTHON,
        "-c",
        BURN + "burn(0.5)",
    )
    assert proc.returncode == 0, proc.stderr
    assert sum(samples_per_pid(out).values()) > 20, proc.stderr
    assert metadata(out, "cpu_processes_not_sampled") == 0
    with open_trace(out) as t:
        names = {r["name"] for r in t.query("select name from process where name is not null")}
    assert "python3" in names, names


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("runuser"), reason="needs root")
def test_runuser_child_is_sampled(tmp_path: Path) -> None:
    """runuser forks a child that becomes uid 65534 and execs python3: the child's exec
    flush must not hang on the condition variable its parent's writer was waiting on at the
    fork, and python3 (another user) loads the library from the run's world-readable copy
    and writes into uid-65534/."""
    out = tmp_path / "runuser.perfetto-trace"
    proc = record_cpu(out, "runuser", "-u", "nobody", "--", PYTHON, "-c", BURN + "burn(0.5)")
    assert proc.returncode == 0, proc.stderr
    assert metadata(out, "cpu_processes_not_sampled") == 0, proc.stderr
    with open_trace(out) as t:
        # The process keeps its first image's name (runuser); its thread is python3's.
        python_samples = t.scalar(
            "select count(*) from perf_sample join thread using (utid) "
            "where thread.name = 'python3'"
        )
    assert python_samples > 20, proc.stderr


def test_child_without_the_library_is_named(tmp_path: Path) -> None:
    """A child started without LD_PRELOAD has no stream: the summary and the metadata name
    it as not sampled instead of saying nothing."""
    out = tmp_path / "unpreloaded.perfetto-trace"
    child = f"env -u LD_PRELOAD {PYTHON} -c 'import time; time.sleep(0.5)'"
    proc = record_cpu(out, "/bin/sh", "-c", f"{child}; true")
    assert proc.returncode == 0, proc.stderr
    assert metadata(out, "cpu_processes_not_sampled") == 1, proc.stderr
    named = metadata(out, "cpu_processes_not_recorded")
    assert isinstance(named, str) and "python3)" in named, named  # "(env/python3)": its images
    assert "1 processes of the target's tree were not sampled" in proc.stderr
    assert "python3)" in proc.stderr


@pytest.mark.skipif(cupti_headers() is None, reason="CUPTI headers not installed")
def test_fake_cuda_app_ending_with_exit_delivers_its_gpu_records(
    fake: FakeCupti, tmp_path: Path
) -> None:
    """The fake CUDA application launches 300 kernels and leaves through _exit() before the
    library's periodic pull (1 s): the preloaded sampler library runs the injection library's
    final flush, so every kernel and API call is in the trace with the final counters."""
    out = tmp_path / "exit.perfetto-trace"
    env = dict(
        os.environ, XPU_PERF_INJECT_LIB=str(fake.injection), FAKE_CUPTI_RECORDS_PER_BUFFER="64"
    )
    proc = subprocess.run(
        [*RECORD, "--no-cpu", "-o", str(out), "--", str(fake.app), "300", "5", "_exit"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 5, proc.stderr
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice where category = 'kernel'") == 300
        assert t.scalar("select count(*) from slice where category = 'cuda_api'") >= 300
    assert metadata(out, "cupti_streams_without_counters") == 0
    assert "ended without their final flush" not in proc.stderr
