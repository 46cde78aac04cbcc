"""Steps (issue 37, item 5): a range that repeats on the launching thread is used by default
(NVTX, record_function, ProfilerStep#), repeated CUDA graph launches are steps, the output
says which, `--steps NAME` matching nothing is a one-line error, and set-up never becomes the
top finding of a program with steps."""

from __future__ import annotations

import json
from pathlib import Path

from collector import model
from exporters.analysis.analyze import analyze
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from .analysis_traces import LAUNCH_STACK, SYNC_STACK
from .conftest import run_cli

PID = TID = 77


class _Trace:
    def __init__(self) -> None:
        self.events: list[model.Event] = [
            model.ProcessInfo(PID, "python3"),
            model.ThreadInfo(PID, TID, "python3"),
            model.GpuDevice(0, "NVIDIA H200"),
        ]
        self.corr = 0

    def launch(self, ts: int, kernels: list[tuple[int, int, str]], api: str) -> None:
        self.corr += 1
        flow = model.flow_id(PID, self.corr)
        self.events.append(
            model.CpuSlice(
                PID,
                TID,
                ts,
                5_000,
                api,
                model.CAT_CUDA_API,
                {"correlation_id": self.corr},
                flow_ids=(flow,),
                launch_stack=LAUNCH_STACK,
            )
        )
        for kts, kdur, name in kernels:
            self.events.append(
                model.GpuOp(
                    0,
                    7,
                    kts,
                    kdur,
                    name,
                    model.CAT_KERNEL,
                    {"correlation_id": self.corr},
                    correlation_id=self.corr,
                    terminating_flow_ids=(flow,),
                )
            )

    def write(self, path: Path) -> Path:
        with TraceWriter(path) as w:
            w.producer("p").write_all(
                batched(sorted(self.events, key=lambda e: getattr(e, "ts", 0)))
            )
        return path


def _ranged(
    path: Path,
    steps: int = 25,
    warmup_gap: int = 300_000,
    outer: bool = True,
    bwd: int = 2,
    between: int = 1_000_000,
) -> Path:
    """Warm-up launches outside any range, then `steps` NVTX ranges `train_step`, each with
    nested `forward` and `backward` ranges and a varying number of launches (no launch
    pattern to detect), 1 ms of Python between steps."""
    tr = _Trace()
    t = 1_000_000_000
    for i in range(6):  # warm-up: launches of other kernels, no range
        tr.launch(t, [(t + 10_000, 200_000, f"warmup{i}")], "cudaLaunchKernel")
        t += warmup_gap
    for step in range(steps):
        start = t
        n = 3 + step % 4
        fwd_end = t + n * 100_000
        tr.events.append(model.CpuSlice(PID, TID, t, fwd_end - t - 1_000, "forward", "nvtx"))
        for k in range(n):
            tr.launch(t + 1_000, [(t + 20_000, 80_000, f"fwd{k}")], "cudaLaunchKernel")
            t += 100_000
        tr.events.append(model.CpuSlice(PID, TID, t, bwd * 100_000 - 1_000, "backward", "nvtx"))
        for k in range(bwd):
            tr.launch(t + 1_000, [(t + 20_000, 80_000, f"bwd{k}")], "cudaLaunchKernel")
            t += 100_000
        t += between
        if outer:
            tr.events.append(model.CpuSlice(PID, TID, start - 500, t - start, "train_step", "nvtx"))
    return tr.write(path)


def test_a_repeating_range_is_the_step_by_default(tmp_path: Path) -> None:
    path = _ranged(tmp_path / "r.pftrace")
    with open_trace(path) as t:
        analysis = analyze(t)
    steps = analysis.steps
    assert steps.count == 25 and steps.source == "marked"
    assert steps.marked_by == "repeating range 'train_step'"
    assert all(s.name == "train_step" for s in steps.steps)
    doc = json.loads(run_cli("report", path, "--format", "json", check=True).stdout)
    assert doc["step_marks"] == "repeating range 'train_step'" and doc["steps_total"] == 25
    out = " ".join(run_cli("report", path, check=True).stdout.split())
    assert "(marked: repeating range 'train_step')" in out


def test_ranges_after_a_long_warm_up_are_the_steps(tmp_path: Path) -> None:
    """A short program's set-up and warm-up can outlast its marked steps (the H200's 25
    NVTX steps took 91 ms of a 395 ms active span): the ranges still mark the steps, being
    dense over their own stretch and holding most launches."""
    path = _ranged(tmp_path / "r.pftrace", steps=8, warmup_gap=50_000_000)
    with open_trace(path) as t:
        steps = analyze(t).steps
    assert steps.count == 8 and steps.marked_by == "repeating range 'train_step'"


def test_a_part_of_each_step_is_not_the_step(tmp_path: Path) -> None:
    """`backward` ranges that hold most launches but leave each step's forward launches
    between them are no steps (the bundled example's converted trace picked `backward`)."""
    path = _ranged(tmp_path / "r.pftrace", steps=12, outer=False, bwd=8, between=100_000)
    with open_trace(path) as t:
        steps = analyze(t).steps
    assert steps.marked_by == ""


def test_steps_naming_nothing_is_an_error(tmp_path: Path) -> None:
    path = _ranged(tmp_path / "r.pftrace", steps=5)
    res = run_cli("report", path, "--steps", "ProfilerStep*")
    assert res.returncode != 0
    lines = [x for x in res.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and "--steps 'ProfilerStep*'" in lines[0]
    assert res.stdout == ""
    # A name that matches is used.
    ok = json.loads(
        run_cli("report", path, "--steps", "backward", "--format", "json", check=True).stdout
    )
    assert ok["steps_total"] == 5 and ok["step_marks"] == "slices named 'backward'"


def test_graph_replays_are_steps_and_set_up_is_not_the_top_finding(tmp_path: Path) -> None:
    """A model moved to the GPU (a long blocking copy and sync: set-up), a graph captured,
    then replayed 50 times with 2 ms of Python between replays: the steps are the replays,
    the findings cover them, and the set-up sync is not the top finding."""
    tr = _Trace()
    t = 1_000_000_000
    # set-up: 30 copies each followed by a sync that waits 20 ms for the GPU
    for _i in range(30):
        tr.launch(t, [(t + 10_000, 20_000_000, "Memcpy HtoD")], "cudaMemcpyAsync")
        tr.events.append(
            model.CpuSlice(
                PID,
                TID,
                t + 20_000,
                20_000_000,
                "cudaStreamSynchronize",
                model.CAT_CUDA_API,
                {},
                launch_stack=SYNC_STACK,
            )
        )
        t += 20_100_000
    for _ in range(50):
        kernels = [(t + 20_000 + k * 100_000, 100_000, f"graph_k{k}") for k in range(8)]
        tr.launch(t, kernels, "cudaGraphLaunch")
        t += 20_000 + 800_000 + 2_000_000
    path = tr.write(tmp_path / "g.pftrace")
    with open_trace(path) as tp:
        analysis = analyze(tp)
    assert analysis.steps.count == 50
    assert analysis.steps.source.startswith("CUDA graph launches")
    assert analysis.span.focus_kind == "steps"
    assert analysis.findings and analysis.findings[0].code != "HOST_SYNC"
