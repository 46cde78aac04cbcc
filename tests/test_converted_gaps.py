"""Gaps of a trace without CPU samples (a converted PyTorch profiler trace): the host time
inside the framework op that makes the next launch is that op launching the model's own
work (launch-bound), the host time before the op began is other CPU work, each part
exactly (issue 37: `report` advised moving `aten::mm` "off the critical path")."""

from __future__ import annotations

from pathlib import Path

from collector import model
from exporters.analysis.analyze import analyze
from exporters.perfetto.trace_processor import open_trace

from .test_steps_found import PID, TID, _Trace

GAP_BEFORE_OP = 600_000  # host time between the last op's end and the next op
IN_OP = 400_000  # the next op's own time before its launch
KERNEL = 100_000
STEPS = 12


def _converted(path: Path) -> Path:
    """A loop of: a cpu_op `aten::mm` that launches one kernel after IN_OP ns, GAP_BEFORE_OP
    ns of host time (no samples, no slice) before it; each kernel runs KERNEL ns, so every
    gap is exactly GAP_BEFORE_OP + IN_OP + the launch call's rest."""
    tr = _Trace()
    t = 1_000_000_000
    for _ in range(STEPS):
        op_start = t + GAP_BEFORE_OP
        launch = op_start + IN_OP
        tr.events.append(model.CpuSlice(PID, TID, op_start, IN_OP + 10_000, "aten::mm", "cpu_op"))
        tr.launch(launch, [(launch + 8_000, KERNEL, "gemm")], "cudaLaunchKernel")
        t = launch + 8_000 + KERNEL
    return tr.write(path)


def test_host_time_inside_the_launching_op_is_launching(tmp_path: Path) -> None:
    path = _converted(tmp_path / "c.pftrace")
    with open_trace(path) as t:
        analyze(t)
        gaps = t.query(
            "select host_ns, launch_host_ns, other_ns from xpu_gpu_gap where api_id is not null"
        )
    assert len(gaps) >= STEPS - 2
    for g in gaps:
        # From the previous kernel's end: GAP_BEFORE_OP of other code, then the op's IN_OP.
        assert g["host_ns"] == GAP_BEFORE_OP
        assert g["launch_host_ns"] == IN_OP
        assert g["other_ns"] == 0
