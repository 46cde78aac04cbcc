"""The program's own CUPTI profiler under `record` (issue 25), against the fake CUPTI: a
Kineto-like client in the target (tests/fake_cupti/fake_profiler_client.c: a subscriber with
a launch callback, a clock of its own, 4 KiB buffers, two traces with warmup) is detected,
counted and reported, and served from our session: it gets what it gets without us, every
record of its active steps that we get, in its own clock; refused with --program-profiler
refuse; served too when it starts before CUDA; and --capture-range torch-profiler windows
follow its active steps."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from collector.recording.kept_streams import GPU_STREAMS, KeptSource
from collector.recording.program_profiler import injection_tool
from collector.sources.cupti_program import caller_label
from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import REPO
from .fake_cupti.build import FakeCupti, cupti_headers
from .test_cupti_fake import metadata

pytestmark = pytest.mark.skipif(cupti_headers() is None, reason="CUPTI headers not installed")

LAUNCHES = 50
TRACES = 2  # the client's schedule: two traces of warmup (5 launches) then LAUNCHES active
WARMUP, BETWEEN = 5, 3  # per trace: warmup launches, launches after its trace
CLIENT = re.compile(r"^client: (.*)$", re.M)


def client_got(stdout: str) -> dict[str, int]:
    """The client's own account: subscribe result, records and callbacks it got."""
    match = CLIENT.search(stdout)
    assert match, stdout
    return {k: int(v) for k, v in (kv.split("=") for kv in match.group(1).split())}


def run(
    fake: FakeCupti, out: Path | None, scenario: str, *flags: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """fake_app's scenario, bare (out None) or under record --no-cpu."""
    cmd = [str(fake.app), str(LAUNCHES), "0", scenario]
    full_env = dict(
        os.environ, XPU_PERF_INJECT_LIB=str(fake.injection), FAKE_CUPTI_RECORDS_PER_BUFFER="64"
    )
    full_env.update(env or {})
    if out is not None:
        cmd = [sys.executable, "-m", "collector.cli", "record", "--no-cpu", *flags, "-o", str(out),
               "--", *cmd]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=full_env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def bare(fake: FakeCupti) -> dict[str, int]:
    """What the client gets without us: CUPTI's one subscriber is its own."""
    return client_got(run(fake, None, "program_profiler").stdout)


@pytest.fixture(scope="module")
def served(
    fake: FakeCupti, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("served") / "served.perfetto-trace"
    return out, run(fake, out, "program_profiler")


def test_bare_client_gets_its_traces(bare: dict[str, int]) -> None:
    """The reference: without us the client subscribes and keeps its active steps."""
    assert bare["subscribe"] == 0
    assert bare["kernels"] == bare["active"] == TRACES * LAUNCHES
    assert bare["memcpy"] == TRACES
    assert bare["callbacks"] == TRACES * (WARMUP + LAUNCHES + BETWEEN)
    assert bare["in_clock"] == bare["kernels"] + bare["memcpy"]


def test_served_client_gets_what_it_gets_without_us(served, bare: dict[str, int]) -> None:
    _, proc = served
    got = client_got(proc.stdout)
    assert got["subscribe"] == 0  # not CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED (39)
    for key in ("kernels", "active", "memcpy", "callbacks"):
        assert got[key] == bare[key], key
    # Every record in its own clock (2 * CLOCK_MONOTONIC + 12345), within its traces.
    assert got["in_clock"] == got["kernels"] + got["memcpy"]


def test_client_without_a_clock_of_its_own_gets_cuptis_default(
    fake: FakeCupti, tmp_path: Path
) -> None:
    """No timestamp callback of its own: its records come in CUPTI's default clock
    (CLOCK_REALTIME), not ours (CLOCK_MONOTONIC)."""
    no_clock = {"FAKE_CLIENT_OWN_CLOCK": "0"}
    bare = client_got(run(fake, None, "program_profiler", env=no_clock).stdout)
    got = client_got(
        run(fake, tmp_path / "t.perfetto-trace", "program_profiler", env=no_clock).stdout
    )
    assert bare["in_clock"] == bare["kernels"] + bare["memcpy"] == TRACES * (LAUNCHES + 1)
    assert got["in_clock"] == got["kernels"] + got["memcpy"] == TRACES * (LAUNCHES + 1)


def test_served_client_gets_every_record_we_get(served) -> None:
    """The forwarding path: the client's active kernels are exactly ours of its steps (the
    same correlation ids), and ours are complete."""
    out, proc = served
    got = client_got(proc.stdout)
    with open_trace(out) as t:
        ours = t.query(
            "select count(*) n, sum(extract_arg(arg_set_id, 'debug.correlation_id')) s "
            "from slice where category = 'kernel' and name = 'active_kernel'"
        )[0]
        assert (ours["n"], ours["s"]) == (got["active"], got["active_correlations"])
        kernels = t.scalar("select count(*) from slice where category = 'kernel'")
        assert kernels == LAUNCHES + TRACES * (WARMUP + LAUNCHES + BETWEEN)
        assert metadata(t, "cupti_gpu_ops_without_api") == 0


def test_served_client_is_counted_and_named(served) -> None:
    out, proc = served
    # subscribe, its callback, its clock, its buffers; per trace 2 enables, 2 flushes, 2
    # disables.
    calls = 4 + TRACES * 6
    assert f"the program's own CUPTI profiler ({calls} CUPTI calls in 1 processes" in proc.stderr
    assert "--program-profiler serve: served" in proc.stderr
    line = next(x for x in proc.stderr.splitlines() if "cuptiSubscribe x1" in x)
    assert re.search(r"pid \d+ \(fake_app\): fake_app: cuptiSubscribe x1 served", line), line
    assert "cuptiActivityEnable x4 served" in line
    with open_trace(out) as t:
        assert metadata(t, "cupti_program_cupti_calls") == calls
        assert metadata(t, "cupti_program_cupti_processes") == 1
        assert metadata(t, "cupti_program_cupti_refused") == 0
        assert metadata(t, "cupti_program_profiler") == "serve"
        assert "cuptiSubscribe x1 served" in metadata(t, "cupti_program_profilers")
        # Each of its active kernels and copies reached it: at least those records.
        assert metadata(t, "cupti_program_records_forwarded") >= TRACES * (LAUNCHES + 1)
        assert metadata(t, "cupti_program_records_not_forwarded") == 0
        assert metadata(t, "cupti_program_callbacks_forwarded") == 2 * TRACES * (
            WARMUP + LAUNCHES + BETWEEN
        )


def test_a_recording_written_from_its_kept_streams_says_it_too(
    fake: FakeCupti, tmp_path: Path
) -> None:
    """`record --from-streams` reads the same rows: the lines, without the mode (not kept)."""
    kept = tmp_path / "kept"
    run(fake, tmp_path / "k.perfetto-trace", "program_profiler", "--keep-streams", str(kept))
    source = KeptSource(GPU_STREAMS, kept)
    for _ in source.events():
        pass
    assert "cuptiSubscribe x1 served" in source.notes()["program_profilers"]
    header, line = source.summary_lines()
    assert header == "the program's own CUPTI profiler (16 CUPTI calls in 1 processes):"
    assert "served from xpu-perf's session" in line


def test_refused_client_gets_nothing_and_we_say_so(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "refused.perfetto-trace"
    proc = run(fake, out, "program_profiler", "--program-profiler", "refuse")
    got = client_got(proc.stdout)
    assert got["subscribe"] == 39  # as CUPTI answers a second subscriber
    assert got["kernels"] == got["callbacks"] == 0
    assert "refused (CUPTI serves one subscriber, and xpu-perf held it)" in proc.stderr
    with open_trace(out) as t:
        assert metadata(t, "cupti_program_cupti_refused") == metadata(
            t, "cupti_program_cupti_calls"
        )
        kernels = t.scalar("select count(*) from slice where category = 'kernel'")
        assert kernels == LAUNCHES + TRACES * (WARMUP + LAUNCHES + BETWEEN)


def test_client_started_before_cuda_is_served(fake: FakeCupti, tmp_path: Path) -> None:
    """Its first CUPTI call initialises CUDA first (cupti_interpose.c), so ours is the
    subscriber: without that, ours was the refused one and the trace had no API calls."""
    out = tmp_path / "first.perfetto-trace"
    proc = run(fake, out, "profiler_first")
    got = client_got(proc.stdout)
    assert got["subscribe"] == 0 and got["active"] == TRACES * LAUNCHES
    assert "had a CUPTI subscriber before xpu-perf's" not in proc.stderr
    with open_trace(out) as t:
        assert metadata(t, "cupti_subscribe_refused") == 0
        api = t.scalar("select count(*) from slice where category = 'cuda_api'")
        assert api == TRACES * (WARMUP + LAUNCHES + BETWEEN + 1)  # + its copy


def test_windows_follow_the_client_active_steps(fake: FakeCupti, tmp_path: Path) -> None:
    """--capture-range torch-profiler: one window per trace, from its first external
    correlation push (its first active step) to its disable; nothing of its warmup, of the
    launches between its traces or before it, though its kinds were on during warmup."""
    out = tmp_path / "windows.perfetto-trace"
    proc = run(fake, out, "program_profiler", "--capture-range", "torch-profiler")
    got = client_got(proc.stdout)
    assert got["active"] == TRACES * LAUNCHES  # still served
    assert "capture windows (torch-profiler): 2" in proc.stderr
    with open_trace(out) as t:
        windows = t.query(
            "select extract_arg(arg_set_id, 'debug.reason') reason, "
            "extract_arg(arg_set_id, 'debug.end_reason') end_reason "
            "from slice where category = 'xpu_perf_window'"
        )
        assert windows == [{"reason": "torch-profiler", "end_reason": "torch-profiler stop"}] * 2
        names = t.query(
            "select name, count(*) n from slice where category in ('kernel', 'memcpy') "
            "group by name order by name"
        )
        assert names == [
            {"name": "Memcpy HtoD", "n": TRACES},
            {"name": "active_kernel", "n": TRACES * LAUNCHES},
        ]
        # The second trace's warmup came while its kinds were on and ours had been: left out.
        assert metadata(t, "cupti_gpu_ops_outside_window") == WARMUP
        assert metadata(t, "cupti_gpu_ops_without_api") == 0


def test_another_tools_injection_is_named(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "nsys.perfetto-trace"
    nsys = "/opt/nvidia/nsight-systems/2025.1/target-linux-x64/libToolsInjection64.so"
    proc = run(fake, out, "two_devices", env={"CUDA_INJECTION64_PATH": nsys})
    assert f"CUDA_INJECTION64_PATH was set to {nsys} (Nsight Systems (nsys))" in proc.stderr
    with open_trace(out) as t:
        assert metadata(t, "cupti_replaced_injection") == nsys
        assert metadata(t, "cupti_replaced_injection_tool") == "Nsight Systems (nsys)"
        assert t.scalar("select count(*) from slice where category = 'kernel'") == 5


def test_names_of_callers_and_tools() -> None:
    assert caller_label("libtorch_cpu.so") == "libtorch_cpu.so (torch.profiler/Kineto)"
    assert caller_label("libtorch_cuda.so") == "libtorch_cuda.so (torch.profiler/Kineto)"
    assert caller_label("libkineto.so.1") == "libkineto.so.1 (Kineto)"
    assert caller_label("fake_app") == "fake_app"
    assert injection_tool("/usr/local/cuda/compute-sanitizer/libsanitizer-collection.so") == (
        "compute-sanitizer"
    )
    assert injection_tool("/opt/x/libmine.so") == "another tool"
