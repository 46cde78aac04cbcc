"""Real-eBPF tests of the CPU sampler (root + bcc; CI runs them as root).

Each test records a native program with a known call structure through the standalone
recorder (bcc sources → TraceWriter) and checks the result with trace_processor SQL.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from exporters.folded.folded import fold
from exporters.perfetto.engine.trace_processor import open_trace
from tests.native.bpf_harness import (
    CPU_SAMPLES_SQL,
    REPO,
    SAMPLES_PER_FUNCTION_SQL,
    STATS_ERRORS_SQL,
    metadata,
    query,
    record,
    record_cmd,
    requires_bpf,
)
from tests.native.build import build_all

pytestmark = requires_bpf
# 999 Hz rather than the 99 Hz default: ~4000 samples keep the binomial noise of the 3:1 split
# and of the count well inside the 5% bounds even when the target shares its CPUs (a loaded CI
# runner); on an idle machine timer sampling is systematic and 99 Hz is as exact.
FREQ = 999


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("native"))


def _samples_per_function(trace: Path) -> dict[str, int]:
    return {r["function"]: r["samples"] for r in query(trace, SAMPLES_PER_FUNCTION_SQL)}


def _cpu_sample_count(trace: Path) -> int:
    return query(trace, f"select count(*) as n from ({CPU_SAMPLES_SQL})")[0]["n"]


def _assert_clean(trace: Path) -> dict[str, object]:
    assert query(trace, STATS_ERRORS_SQL) == []
    meta = metadata(trace)
    for counter in (
        "lost_ringbuf_full",
        "user_stack_errors",
        "kernel_stack_errors",
        "decode_errors",
    ):
        assert meta[f"ebpf_{counter}"] == 0, (counter, meta)
    return meta


def test_call_ratio_and_sample_count(programs: dict[str, Path], tmp_path: Path) -> None:
    trace, cpu_file = tmp_path / "two_callers.perfetto-trace", tmp_path / "cpu.txt"
    run = record(trace, "--freq", str(FREQ), "--", str(programs["two_callers"]), "4", str(cpu_file))
    assert run.returncode == 0, run.stderr
    cpu_seconds = float(cpu_file.read_text().split()[0])

    # Every CPU sample is counted: freq × CPU time, within 5%.
    samples = _cpu_sample_count(trace)
    expected = FREQ * cpu_seconds
    assert abs(samples - expected) <= 0.05 * expected, (samples, expected)

    # The 3:1 split of work between the two callers shows in the stacks: heavy_caller's share
    # of the samples is 75% within 5%.
    per_function = _samples_per_function(trace)
    heavy, light = per_function.get("heavy_caller", 0), per_function.get("light_caller", 0)
    assert light > 0, per_function
    assert heavy / (heavy + light) == pytest.approx(0.75, rel=0.05), per_function
    # Full stacks: every sample in the work loop unwinds to main through both frames.
    assert per_function["work"] >= 0.95 * samples
    assert per_function["main"] >= 0.95 * samples

    meta = _assert_clean(trace)
    assert meta["ebpf_cpu_samples"] == samples

    # The same split through `folded --mode cpu` (the lead's shared SQL views).
    with open_trace(trace) as tp:
        folded = fold(tp, "cpu", "samples")
    under = {"heavy_caller": 0.0, "light_caller": 0.0}
    for stack, weight in folded.lines:
        for caller in under:
            if f";{caller};" in f";{stack};":
                under[caller] += weight
    share = under["heavy_caller"] / (under["heavy_caller"] + under["light_caller"])
    assert share == pytest.approx(0.75, rel=0.05), under
    assert folded.cpu_samples == samples


def test_cpp_frames_are_demangled(programs: dict[str, Path], tmp_path: Path) -> None:
    trace = tmp_path / "cpp.perfetto-trace"
    run = record(trace, "--", str(programs["two_callers_cpp"]), "2")
    assert run.returncode == 0, run.stderr
    per_function = _samples_per_function(trace)
    heavy = per_function.get("xpu_test::Worker<3>::run(unsigned long)", 0)
    light = per_function.get("xpu_test::Worker<1>::run(unsigned long)", 0)
    assert heavy > light > 0, per_function
    assert "xpu_test::spin(unsigned long)" in per_function
    assert not [name for name in per_function if name.startswith("_Z")]
    _assert_clean(trace)


def test_forked_child_is_sampled(programs: dict[str, Path], tmp_path: Path) -> None:
    trace, cpu_file = tmp_path / "fork.perfetto-trace", tmp_path / "cpu.txt"
    run = record(
        trace, "--freq", str(FREQ), "--", str(programs["two_callers"]), "2", str(cpu_file), "--fork"
    )
    assert run.returncode == 0, run.stderr
    cpu_seconds, child_pid, parent_pid = cpu_file.read_text().split()
    rows = query(
        trace,
        f"select p.pid, count(*) as n from ({CPU_SAMPLES_SQL}) s join process p using (upid) "
        "group by p.pid",
    )
    per_pid = {r["pid"]: r["n"] for r in rows}
    # The child (forked after recording started, never exec'd) carries the work ...
    expected = FREQ * float(cpu_seconds)
    assert abs(per_pid.get(int(child_pid), 0) - expected) <= 0.05 * expected, (per_pid, expected)
    # ... and its stacks resolve through the parent's image.
    per_function = _samples_per_function(trace)
    assert per_function.get("heavy_caller", 0) > 0 and per_function.get("light_caller", 0) > 0
    # The waiting parent burns (almost) no CPU.
    assert per_pid.get(int(parent_pid), 0) <= 0.01 * expected
    _assert_clean(trace)


def test_sigint_gives_valid_trace(programs: dict[str, Path], tmp_path: Path) -> None:
    trace = tmp_path / "sigint.perfetto-trace"
    proc = subprocess.Popen(
        record_cmd(trace, "--", str(programs["two_callers"]), "60"),
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    # Wait until samples flow (compiling the BPF program takes a few seconds).
    time.sleep(6)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGINT, stderr  # the target's status, passed on
    assert trace.exists() and not trace.with_name(trace.name + ".tmp").exists()
    assert _cpu_sample_count(trace) > 0
    assert _samples_per_function(trace).get("heavy_caller", 0) > 0
    _assert_clean(trace)
