"""The facade: everything the analyses say about a trace, for `report`, `report --format
json` and the tests.

    analysis = analyze(trace, Scope(span_all=False, steps_glob=None))  # None: found
    analysis.findings   # ranked, each with code, title, idle_ns, share, locations, ...
    analysis.steps      # per-step wall time, GPU busy by kind, idle
    analysis.idle       # idle time by cause, the longest gaps
    analysis.launches   # launch latency, short kernels, queue depth, copies, overlap

The span: the active span (first GPU op to the end of the last; only the capture windows'
time in a windowed trace) unless `Scope.span_all`.  SQL views for `query`: xpu_step,
xpu_step_busy, xpu_gpu_gap, xpu_launch, xpu_copy, xpu_stream_queue, xpu_kernel_overlap,
xpu_gpu_counter, xpu_kernel_metrics (GPU counters per kernel), xpu_memory_peak,
xpu_allocation (device memory)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporters.analysis import device_memory, gpu_metrics, launches, tables
from exporters.analysis.findings import Context, Finding, findings
from exporters.analysis.idle import IdleSummary, summary
from exporters.analysis.launches import LaunchStats, launch_stats
from exporters.analysis.steps import StepSummary, step_table
from exporters.analysis.tables import DEFAULT_SCOPE, Scope
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace
from exporters.perfetto.engine.views import load_views

__all__ = ["Analysis", "Scope", "analyze", "load", "load_for_query"]


@dataclass(frozen=True)
class Span:
    ts: int
    end_ts: int
    dur: int
    kind: str  # 'active' or 'all'
    regions: int  # capture windows analysed (1: the span itself)
    busy_ns: int  # GPU busy, summed over devices
    devices: int
    # What the findings and the idle causes cover: the steady-state steps (from each
    # process's second step), else the span itself.
    focus_ts: int
    focus_dur: int
    focus_kind: str  # 'steps', or the span's kind
    focus_busy_ns: int
    steps: int

    def describe(self) -> str:
        what = (
            "the whole trace"
            if self.kind == "all"
            else "the active span (first GPU op to the end of the last)"
        )
        if self.regions > 1:
            what += f", inside {self.regions} capture windows"
        return f"{what}: {self.dur / 1e6:.1f} ms"

    def describe_focus(self) -> str:
        if self.focus_kind != "steps":
            return self.describe()
        return (
            f"from step 2 of {self.steps} on (set-up and the warm-up step left out): "
            f"{self.focus_dur / 1e6:.1f} ms of {self.describe()}"
        )

    @property
    def focus_ns(self) -> int:
        """The focus's device time: idle shares are of this."""
        return self.focus_dur * max(1, self.devices)


@dataclass(frozen=True)
class Analysis:
    span: Span
    idle: IdleSummary
    steps: StepSummary
    launches: LaunchStats
    findings: list[Finding]

    def to_json(self) -> dict[str, Any]:
        return {
            "span": {
                "kind": self.span.kind,
                "ts": self.span.ts,
                "dur_ns": self.span.dur,
                "regions": self.span.regions,
                "gpu_busy_ns": self.span.busy_ns,
                "devices": self.span.devices,
                "focus": self.span.focus_kind,
                "focus_ts": self.span.focus_ts,
                "focus_dur_ns": self.span.focus_dur,
                "focus_gpu_busy_ns": self.span.focus_busy_ns,
            },
            "findings": [f.to_json() for f in self.findings],
            "steps": [
                {
                    "step": s.step,
                    "name": s.name,
                    "ts": s.ts,
                    "dur_ns": s.dur,
                    "compute_ns": s.compute_ns,
                    "nccl_ns": s.nccl_ns,
                    "memcpy_ns": s.memcpy_ns,
                    "memset_ns": s.memset_ns,
                    "busy_ns": s.busy_ns,
                    "idle_ns": s.idle_ns,
                }
                for s in self.steps.steps
            ],
            "step_source": self.steps.source,
            # which slices marked the steps (a ProfilerStep, --steps, a repeating range)
            **({"step_marks": self.steps.marked_by} if self.steps.marked_by else {}),
            "steps_total": self.steps.count,
            # Set where "steps" holds the slowest only (more than steps.STEP_ROWS found).
            **({"steps_note": self.steps.shown_note()} if self.steps.capped else {}),
            "idle": {
                "gaps": self.idle.gaps,
                "idle_ns": self.idle.idle_ns,
                "by_class_ns": self.idle.by_class,
            },
            "launches": {
                "kernels": self.launches.launches,
                "shorter_than_call": self.launches.shorter_than_call,
                "latency_p50_ns": self.launches.latency_p50_ns,
                "latency_p99_ns": self.launches.latency_p99_ns,
            },
        }


def load(trace: Trace, scope: Scope = DEFAULT_SCOPE, window: int | None = None) -> None:
    """The analysis tables (views first), for the commands."""
    load_views(trace, window)
    tables.load(trace, scope)
    launches.load(trace)
    gpu_metrics.load(trace)
    device_memory.load(trace)


def load_for_query(trace: Trace) -> None:
    """The analysis tables and `xpu_analysis_busy_island` (the analyses use the islands as
    arrays; a table of them is made only for a user's SQL)."""
    from exporters.analysis import busy

    load(trace)
    sql_modules.once(trace, "xpu_analysis_busy_island", busy.create_island_table)


def analyze(trace: Trace, scope: Scope = DEFAULT_SCOPE, window: int | None = None) -> Analysis:
    load(trace, scope, window)
    row = trace.query(
        "select s.ts, s.end_ts, s.dur, s.kind, (select count(*) from xpu_analysis_region) as r, "
        "(select count(distinct device_track_id) from xpu_analysis_op) as devices, "
        "f.ts as f_ts, f.end_ts as f_end, f.dur as f_dur, f.kind as f_kind, f.steps "
        "from xpu_analysis_span s, xpu_analysis_focus f"
    )[0]
    # The devices' busy islands inside the regions, whole and inside the focus.  (numpy
    # where it is used: `folded` imports this module, and its second look runs no numpy.)
    import numpy as np

    from exporters.analysis.busy import ANY, gpu_busy

    found = gpu_busy(trace).device_islands(ANY, analysed=True)
    f_ts, f_end = int(row["f_ts"]), int(row["f_end"])
    in_focus = np.minimum(found.end_ts, f_end) - np.maximum(found.ts, f_ts)
    row["busy"] = int((found.end_ts - found.ts).sum())
    row["f_busy"] = int(np.maximum(in_focus, 0).sum())
    span = Span(
        ts=int(row["ts"]),
        end_ts=int(row["end_ts"]),
        dur=int(row["dur"]),
        kind=str(row["kind"]),
        regions=int(row["r"]),
        busy_ns=int(row["busy"]),
        devices=int(row["devices"]),
        focus_ts=int(row["f_ts"]),
        focus_dur=int(row["f_dur"]),
        focus_kind=str(row["f_kind"]),
        focus_busy_ns=int(row["f_busy"]),
        steps=int(row["steps"]),
    )
    idle = summary(trace)
    stats = launch_stats(trace)
    ranked = findings(Context(trace, span.focus_ns, idle, stats))
    return Analysis(span, idle, step_table(trace), stats, ranked)
