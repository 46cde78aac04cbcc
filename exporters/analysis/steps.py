"""Steps: wall time, GPU busy by kind of work and idle by cause, and their spread."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from exporters.perfetto.trace_processor import Trace


@dataclass(frozen=True)
class Step:
    step: int
    name: str
    ts: int
    dur: int
    compute_ns: int
    nccl_ns: int
    memcpy_ns: int
    memset_ns: int
    busy_ns: int  # the union of all of them on the step's devices
    idle_ns: int  # devices x wall time - busy
    devices: int


@dataclass(frozen=True)
class StepSummary:
    source: str  # how the boundaries were found ('' when there are no steps)
    steps: list[Step]
    median_ns: int
    p90_ns: int
    max_ns: int
    spread: float  # (max - min) / median
    slowest: list[Step]


def step_table(trace: Trace, slowest: int = 3) -> StepSummary:
    rows = trace.query("select * from xpu_step_busy order by step")
    steps = [
        Step(
            step=int(r["step"]),
            name=str(r["name"]),
            ts=int(r["ts"]),
            dur=int(r["dur"]),
            compute_ns=int(r["compute_ns"]),
            nccl_ns=int(r["nccl_ns"]),
            memcpy_ns=int(r["memcpy_ns"]),
            memset_ns=int(r["memset_ns"]),
            busy_ns=int(r["busy_ns"]),
            idle_ns=max(0, int(r["dur"]) * max(1, int(r["devices"])) - int(r["busy_ns"])),
            devices=int(r["devices"]),
        )
        for r in rows
    ]
    if not steps:
        return StepSummary("", [], 0, 0, 0, 0.0, [])
    durs = sorted(s.dur for s in steps)
    median = int(statistics.median(durs))
    p90 = durs[min(len(durs) - 1, (len(durs) * 90 + 99) // 100 - 1)]
    return StepSummary(
        source=str(rows[0]["source"]),
        steps=steps,
        median_ns=median,
        p90_ns=p90,
        max_ns=durs[-1],
        spread=(durs[-1] - durs[0]) / median if median else 0.0,
        slowest=sorted(steps, key=lambda s: -s.dur)[:slowest],
    )
