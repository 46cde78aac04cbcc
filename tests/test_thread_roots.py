"""Stacks rooted at names a person recognises (issue 35): the flamegraph's roots, the folded
lines and the report's thread columns read `main`, `pt_autograd_0`, `DataLoader worker 0`,
`rank 1`, never a bare id or the program's name (`python3`) for every thread; on a trace
written as record writes one (processes named by their role, threads by the kernel or
Python) and on converted torch.profiler traces (Kineto's `thread 399 (python3)`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collector import model
from collector.model import Frame, Stack
from exporters.analysis.tables import DEFAULT_SCOPE
from exporters.folded.folded import fold
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.report.queries import collect
from tests.slice_batches import batched

from .conftest import REPO, run_cli

T0 = 10_000_000_000
MS = 1_000_000
PY = "/usr/bin/python3.11"
TRAIN = "/work/app/train.py"

# (pid, tid, thread name as the kernel or Python gave it) -> the root users must read.
THREADS = {
    (100, 100, "python3"): "main",
    (100, 101, "pt_autograd_0"): "pt_autograd_0",
    (100, 102, "python3"): "thread 102",  # a native pool's thread: the program's name only
    (200, 200, "pt_data_worker"): "DataLoader worker 0",
    (200, 201, "python3"): "DataLoader worker 0: thread 201",
    (300, 300, "python3"): "DataLoader worker 1",
    (300, 301, "pin_memory"): "DataLoader worker 1: pin_memory",
}
PROCESSES = {
    100: "python3",
    200: "DataLoader worker 0 (python3)",
    300: "DataLoader worker 1 (python3)",
}


def _write(path: Path, processes: dict[int, str]) -> None:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb  # noqa: F401

    from exporters.perfetto.writer import TraceWriter

    events: list[model.Event] = [model.GpuDevice(0, "NVIDIA H100")]
    for pid, name in processes.items():
        events.append(model.ProcessInfo(pid, name, ("python3", "train.py")))
    stack = Stack(
        (Frame("_start", PY), Frame("work (train.py:10)", TRAIN, 10), Frame("memmove", "libc"))
    )
    t = T0
    for n, (pid, tid, name) in enumerate(THREADS):
        events.append(model.ThreadInfo(pid, tid, name))
        for k in range(5):
            events.append(model.CpuSample(pid, tid, t + k * MS, stack))
        if pid == 100 and tid != 102:  # the main and the autograd thread launch
            flow = model.flow_id(pid, n + 1)
            events.append(
                model.CpuSlice(
                    pid,
                    tid,
                    t,
                    10_000,
                    "cudaLaunchKernel",
                    model.CAT_CUDA_API,
                    {"correlation_id": n + 1},
                    flow_ids=(flow,),
                    launch_stack=stack,
                )
            )
            events.append(
                model.GpuOp(
                    0,
                    7,
                    t + 20_000,
                    MS,
                    f"kernel_{n}",
                    model.CAT_KERNEL,
                    {"correlation_id": n + 1},
                    correlation_id=n + 1,
                    terminating_flow_ids=(flow,),
                )
            )
        t += 10 * MS
    with TraceWriter(path, command_line=["xpu-perf", "record"], sample_frequency_hz=1000) as w:
        w.producer("test").write_all(
            batched(sorted(events, key=lambda e: int(getattr(e, "ts", 0))))
        )


@pytest.fixture(scope="module")
def workers_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("roots") / "workers.perfetto-trace"
    _write(path, PROCESSES)
    return path


def _roots(lines: list[tuple[str, float]]) -> set[str]:
    return {stack.split(";", 1)[0] for stack, _ in lines}


def test_roots_of_a_recorded_trace(workers_trace: Path) -> None:
    with open_trace(workers_trace) as trace:
        cpu = fold(trace, "cpu", "ns")
        gpu = fold(trace, "gpu", "ns")
        full = fold(trace, "cpu", "ns", full_names=True)
    assert _roots(cpu.lines) == set(THREADS.values())
    assert _roots(full.lines) == set(THREADS.values())
    assert _roots(gpu.lines) == {"main", "pt_autograd_0"}


def test_report_thread_columns(workers_trace: Path) -> None:
    with open_trace(workers_trace) as trace:
        report = collect(trace, workers_trace.name, stacks=True, scope=DEFAULT_SCOPE)
    sections = {s.key: s for s in report.sections}
    threads = {r["stack"].split(";", 1)[0] for r in sections["cpu_stacks"].rows}
    assert threads == set(THREADS.values())
    launched = {r["stack"].split(";", 1)[0] for r in sections["launch_stacks"].rows}
    assert launched == {"main", "pt_autograd_0"}
    # The one-screen header counts what the trace holds.
    assert dict(report.summary)["holds"] == "2 kernels, 2 CUDA API calls, 35 CPU samples"


def test_ranks_and_several_plain_processes(tmp_path: Path) -> None:
    """A rank's main thread reads `rank N`; two processes without a role read by their
    program and pid (neither is `main`)."""
    ranked = tmp_path / "ranked.perfetto-trace"
    _write(ranked, {100: "rank 0 (python3)", 200: "rank 1 (python3)", 300: "rank 2 (python3)"})
    plain = tmp_path / "plain.perfetto-trace"
    _write(plain, {100: "python3", 200: "python3", 300: "trainer"})
    with open_trace(ranked) as trace:
        roots = _roots(fold(trace, "cpu", "ns").lines)
    assert {"rank 0", "rank 0: pt_autograd_0", "rank 1", "rank 2: pin_memory"} <= roots
    with open_trace(plain) as trace:
        roots = _roots(fold(trace, "cpu", "ns").lines)
    assert {"python3 pid 100", "python3 pid 100: pt_autograd_0", "trainer pid 300"} <= roots
    assert "main" not in roots


def test_kineto_threads(tmp_path: Path) -> None:
    out = tmp_path / "example.perfetto-trace"
    run_cli("convert", REPO / "bench/data/example_kineto.json.gz", "-o", out, "-q", check=True)
    proc = run_cli("folded", out, "--mode", "gpu")
    assert proc.returncode == 0, proc.stderr
    roots = {line.split(";", 1)[0] for line in proc.stdout.splitlines()}
    assert roots == {"main", "pt_autograd_0"}
