"""A recorded trace for the view/report/flamegraph tests, made without a GPU: `xpu-perf
record` of the fake-CUPTI application (tests/fake_cupti: real injection library, scripted
kernels, copies, launch stacks) followed by a CPU-bound native program, with eBPF CPU
sampling where this machine allows it (root + bcc), as CI does."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector.inject_build import BuildError
from tests.fake_cupti.build import FakeCupti, build_fake, cupti_headers
from tests.native.bpf_harness import bpf_unavailable_reason
from tests.native.build import FLAGS
from tests.native.build import HERE as NATIVE_SRC

from .conftest import REPO

# Enough GPU work that CPU samples of fake_app land inside it (the analysis's focus): the
# eBPF sampler's first sample of the new process comes 4-18 ms after its first kernel on
# this VM, and 200 launches (~14 ms of work) left none there on about one run in three
# (test_top_functions_cover_the_steady_state); 10,000 last ~40 ms, 24-31 samples inside.
FAKE_LAUNCHES = 10000
CPU_SECONDS = 0.3  # two_callers burns this much CPU: ~300 samples at 999 Hz


@dataclass(frozen=True)
class RecordedTrace:
    path: Path
    cpu_samples: bool  # recorded with eBPF CPU sampling (else GPU activity only)


def _fake_cupti_or_skip(work: Path) -> FakeCupti:
    """The fake CUPTI built under `work`; skips the calling test where it cannot be built
    (no CUPTI headers, a failed build), like test_cupti_fake."""
    if cupti_headers() is None:
        pytest.skip("CUPTI headers not installed: no fake-CUPTI recorded trace")
    try:
        return build_fake(work / "fake_cupti")
    except (BuildError, subprocess.CalledProcessError) as exc:
        pytest.skip(f"cannot build the fake CUPTI: {exc}")


def record_fake_gpu_app(work: Path) -> RecordedTrace:
    """Record fake_app + two_callers into work/recorded.perfetto-trace; skips the calling
    test where the fake CUPTI cannot be built (no CUPTI headers), like test_cupti_fake."""
    fake = _fake_cupti_or_skip(work)
    two_callers = work / "two_callers"
    subprocess.run(
        ["gcc", *FLAGS, "-o", str(two_callers), str(NATIVE_SRC / "two_callers.c")], check=True
    )
    cpu = bpf_unavailable_reason() is None
    out = work / "recorded.perfetto-trace"
    env = dict(
        os.environ, XPU_PERF_INJECT_LIB=str(fake.injection), FAKE_CUPTI_RECORDS_PER_BUFFER="64"
    )
    sampling = ["--freq", "999"] if cpu else ["--no-cpu"]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "record",
            *sampling,
            "-o",
            str(out),
            "--",
            "sh",
            "-c",
            f'"$0" {FAKE_LAUNCHES} 0 && "$1" {CPU_SECONDS}',
            str(fake.app),
            str(two_callers),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return RecordedTrace(out, cpu)


STEPS_PER_PROCESS = 30  # fake_app "steps": 3 launches, then 5 ms of CPU in prepare_batch


def record_fake_steps(work: Path) -> Path:
    """Record two processes of one program (two fake_app "steps" started by one shell), each
    STEPS_PER_PROCESS training-like steps whose GPU idles while the host prepares the next
    batch, with the in-process CPU sampler; into work/steps.perfetto-trace.  Skips the calling
    test where the fake CUPTI cannot be built, as record_fake_gpu_app does."""
    fake = _fake_cupti_or_skip(work)
    out = work / "steps.perfetto-trace"
    env = dict(
        os.environ, XPU_PERF_INJECT_LIB=str(fake.injection), FAKE_CUPTI_RECORDS_PER_BUFFER="64"
    )
    steps = f'"$0" {STEPS_PER_PROCESS} 0 steps'
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--freq", "999", "-o", str(out),
         "--", "sh", "-c", f"{steps} & {steps}; wait", str(fake.app)],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return out
