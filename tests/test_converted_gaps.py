"""Gaps of a trace without CPU samples (a converted PyTorch profiler trace): the host time
inside the framework op that makes the next launch is that op launching the model's own
work (launch-bound), the host time before the op began is other CPU work, each part
exactly (issue 37: `report` advised moving `aten::mm` "off the critical path")."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from collector import model
from exporters.analysis.analyze import analyze
from exporters.perfetto.engine.trace_processor import open_trace

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
    return _unstacked(tr).write(path)


def _unstacked(tr: _Trace) -> _Trace:
    """As a converted Kineto trace has them: API calls without launch stacks."""
    tr.events = [
        dataclasses.replace(e, launch_stack=None) if isinstance(e, model.CpuSlice) else e
        for e in tr.events
    ]
    return tr


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


def test_host_time_is_located_at_the_slice_around_it(tmp_path: Path) -> None:
    """The other CPU work is named by the slice that encloses its start, not by the op that
    launches next; with no slice around it, the finding says the trace cannot name it."""
    from exporters.analysis import idle

    path = _converted(tmp_path / "bare.pftrace")
    with open_trace(path) as t:
        top = analyze(t).findings[0]
    assert top.code == "PYTHON_BETWEEN_LAUNCHES"
    assert top.locations[0] == idle.BETWEEN_OPS and "does not name" in top.title
    assert "aten::mm" not in top.title

    tr = _Trace()
    t0 = 1_000_000_000
    for _ in range(STEPS):
        op_start = t0 + GAP_BEFORE_OP
        launch = op_start + IN_OP
        tr.events.append(
            model.CpuSlice(
                PID, TID, t0 + 1_000, launch + 20_000 - t0 - 1_000, "augment", "user_annotation"
            )
        )
        tr.events.append(model.CpuSlice(PID, TID, op_start, IN_OP + 10_000, "aten::mm", "cpu_op"))
        tr.launch(launch, [(launch + 8_000, KERNEL, "gemm")], "cudaLaunchKernel")
        t0 = launch + 8_000 + KERNEL
    wrapped = _unstacked(tr).write(tmp_path / "wrapped.pftrace")
    with open_trace(wrapped) as t:
        top = analyze(t).findings[0]
    assert top.code == "PYTHON_BETWEEN_LAUNCHES" and top.locations[0] == "augment"
