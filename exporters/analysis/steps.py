"""Steps: wall time, GPU busy by kind of work and idle by cause, and their spread."""

from __future__ import annotations

from dataclasses import dataclass

from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace


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


# The most steps the summary holds one by one.  The statistics cover every step, counted
# in SQL; beyond this many (a trace of tens of thousands of detected steps), the list keeps
# the slowest, in step order: building every one of them in Python from a large answer
# was most of a second look at a big trace.  xpu_step_busy holds them all.
STEP_ROWS = 10_000


@dataclass(frozen=True)
class StepSummary:
    source: str  # how the boundaries were found ('' when there are no steps)
    steps: list[Step]  # every step, or the STEP_ROWS slowest (in step order) of more
    median_ns: int
    p90_ns: int
    max_ns: int
    spread: float  # (max - min) / median
    slowest: list[Step]
    count: int = 0  # all steps found (len(steps) unless more than STEP_ROWS)
    marked_by: str = ""  # for marked steps: which slices ("slices named 'X'", a range)

    def describe_source(self) -> str:
        return f"{self.source}: {self.marked_by}" if self.marked_by else self.source

    @property
    def capped(self) -> bool:
        return self.count > len(self.steps)

    def shown_note(self) -> str:
        """What the list holds, where it is not every step."""
        if not self.capped:
            return ""
        return (
            f"the {len(self.steps):,} slowest of {self.count:,} steps; all of them: "
            "xpu-perf query TRACE 'select * from xpu_step_busy'"
        )


def _step(r: dict) -> Step:
    return Step(
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


def _dur_at(trace: Trace, rank: int) -> int:
    """The duration at 0-based `rank` of all steps sorted by duration."""
    return int(
        trace.scalar(f"select dur from xpu_step_busy order by dur limit 1 offset {int(rank)}")
    )


def step_table(trace: Trace, slowest: int = 3, rows: int = STEP_ROWS) -> StepSummary:
    n = int(trace.scalar("select count(*) from xpu_step_busy") or 0)
    if not n:
        return StepSummary("", [], 0, 0, 0, 0.0, [])
    if n <= rows:
        listed = trace.query("select * from xpu_step_busy order by step")
    else:
        # The slowest (ties: the earlier step first), in step order.
        listed = trace.query(
            "select * from (select * from xpu_step_busy order by dur desc, step "
            f"limit {int(rows)}) order by step"
        )
    steps = [_step(r) for r in listed]
    bounds = trace.query("select min(dur) as lo, max(dur) as hi from xpu_step_busy")[0]
    lo, hi = int(bounds["lo"]), int(bounds["hi"])
    # statistics.median: the middle duration, or the mean of the two middle ones.
    median = (
        _dur_at(trace, n // 2)
        if n % 2
        else int((_dur_at(trace, n // 2 - 1) + _dur_at(trace, n // 2)) / 2)
    )
    p90 = _dur_at(trace, min(n - 1, (n * 90 + 99) // 100 - 1))
    return StepSummary(
        source=str(listed[0]["source"]),
        steps=steps,
        median_ns=median,
        p90_ns=p90,
        max_ns=hi,
        spread=(hi - lo) / median if median else 0.0,
        slowest=sorted(steps, key=lambda s: -s.dur)[:slowest],
        count=n,
        marked_by=_marked_by(trace) if listed[0]["source"] == "marked" else "",
    )


def _marked_by(trace: Trace) -> str:
    if sql_modules.loaded(trace, "analysis.scope") is None:
        return ""
    return str(trace.scalar("select steps_how from xpu_analysis_scope") or "")
