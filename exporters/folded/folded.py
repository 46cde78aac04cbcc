"""Folded stacks (flamegraph.pl / speedscope input) derived from a trace by SQL alone.

Modes:
- gpu:   <CPU context>;<API call>;[GPU_Kernel]<kernel>  weighted by GPU time;
- cpu:   <thread>;<frames...>                            timer CPU samples;
- merge: both, in one unit.
Units: ns and us keep short kernels visible; `samples` converts time to samples at
`--freq` (samples = dur_ns * F / 1e9, accumulated as floats, rounded only at output) —
the convention of the original profiler seeds.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from collector.frame_names import shorten_stack
from collector.visible_text import printable
from exporters.folded.frames import filter_folded
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace
from exporters.perfetto.engine.views import WindowError, load_views

MODES = ("merge", "gpu", "cpu")
UNITS = ("ns", "us", "samples")
DEFAULT_FREQ_HZ = 99


class FoldedError(Exception):
    """The trace cannot give the asked-for stacks; one line for the user."""


@dataclass(frozen=True)
class FoldedStacks:
    lines: Sequence[tuple[str, float]]  # stack, weight in the requested unit (float)
    unit: str
    gpu_weight_ns: int  # total GPU time behind the lines (for checks and summaries)
    cpu_samples: int

    def render(self) -> str:
        """One `stack weight` line per stack; zero-weight lines are dropped (as flamegraph.pl
        would ignore them), weights rounded to integers only here.  Control characters in
        frame names are shown visibly (`\\x1b`): the lines go to a terminal as often as to a
        file, and a newline in a name would split its line."""
        out = []
        for stack, weight in self.lines:
            rounded = round(weight)
            if rounded > 0:
                out.append(f"{printable(stack)} {rounded}")
        return "\n".join(out) + ("\n" if out else "")


def load_stack_tables(trace: Trace, window: int | None) -> None:
    try:
        load_views(trace, window)
    except WindowError as exc:
        raise FoldedError(str(exc)) from None
    sql_modules.load(trace, "folded.stacks")


def recorded_frequency(trace: Trace) -> float | None:
    value = trace.scalar(
        "select coalesce(int_value, real_value) from xpu_metadata "
        "where key = 'cpu_sample_frequency_hz'"
    )
    return float(value) if value else None


# The GPU ops that start in [{lo}, {hi}) as stacks.sql's xpu_folded_gpu folds them all.
_GPU_BETWEEN = """
WITH g AS (
  SELECT api_id, category, name, sum(dur) AS weight_ns FROM xpu_gpu_op
  WHERE category IN ('kernel', 'memcpy', 'memset') AND ts >= {lo} AND ts < {hi}
  GROUP BY api_id, category, name
)
SELECT
  coalesce(c.root || ';', '') || coalesce(c.context || ';', '')
    || coalesce(replace(c.api_name, ';', ':') || ';', '')
    || CASE g.category WHEN 'kernel' THEN '[GPU_Kernel]' WHEN 'memcpy' THEN '[GPU_Memcpy]'
                       ELSE '[GPU_Memset]' END
    || replace(g.name, ';', ':') AS stack,
  CASE WHEN c.context IS NULL THEN ';;' ELSE ';' || c.context_modules || ';;' END AS modules,
  sum(g.weight_ns) AS weight_ns
FROM g LEFT JOIN xpu_api_context c ON c.api_id = g.api_id
GROUP BY stack, modules
"""
# The CPU samples in [{lo}, {hi}) as stacks.sql's xpu_folded_cpu folds them all.
_CPU_BETWEEN = """
SELECT r.root || coalesce(';' || cp.path, '') AS stack,
       coalesce(';' || cp.modules, '') AS modules, count(*) AS samples
FROM xpu_cpu_sample s
JOIN xpu_thread_root r USING (utid)
LEFT JOIN xpu_callsite_path cp USING (callsite_id)
WHERE s.ts >= {lo} AND s.ts < {hi}
GROUP BY stack, modules
"""


def fold(
    trace: Trace,
    mode: str = "merge",
    unit: str = "ns",
    freq: float | None = None,
    full_names: bool = False,
    window: int | None = None,
    all_frames: bool = False,
    between: tuple[int, int] | None = None,
) -> FoldedStacks:
    """Folded stacks of a trace, or of its capture window `window` (1-based, per process);
    only the GPU ops starting and the CPU samples taken in `between` [lo, hi) where given
    (the span the findings cover: exporters/report/scope.py);
    C++ frames read without parameters and template arguments unless full_names, the
    interpreter's frames between two Python frames hidden unless all_frames
    (exporters/folded/frames.py; stacks that become equal are added up)."""
    if mode not in MODES:
        raise FoldedError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
    if unit not in UNITS:
        raise FoldedError(f"unknown unit {unit!r}; use one of {', '.join(UNITS)}")
    load_stack_tables(trace, window)
    sample_hz = recorded_frequency(trace)
    out_freq = float(freq or sample_hz or DEFAULT_FREQ_HZ)
    weights: dict[str, float] = defaultdict(float)
    gpu_ns = 0
    cpu_samples = 0
    if mode in ("gpu", "merge"):
        gpu_sql = (
            "select stack, modules, weight_ns from xpu_folded_gpu"
            if between is None
            else _GPU_BETWEEN.format(lo=int(between[0]), hi=int(between[1]))
        )
        for row in trace.query(gpu_sql):
            ns = int(row["weight_ns"] or 0)
            gpu_ns += ns
            stack = filter_folded(row["stack"], row["modules"], all_frames)
            weights[stack] += _from_ns(ns, unit, out_freq)
    if mode in ("cpu", "merge"):
        rows = trace.query(
            "select stack, modules, samples from xpu_folded_cpu"
            if between is None
            else _CPU_BETWEEN.format(lo=int(between[0]), hi=int(between[1]))
        )
        if rows and sample_hz is None and unit != "samples":
            raise FoldedError(
                "the trace does not record its CPU sampling frequency; use --unit samples"
            )
        for row in rows:
            n = int(row["samples"])
            cpu_samples += n
            stack = filter_folded(row["stack"], row["modules"], all_frames)
            if unit == "samples":
                # A sample stands for 1/sample_hz s of CPU; at the output frequency that is
                # out_freq/sample_hz samples (1 when the frequencies match).
                weights[stack] += n * (out_freq / sample_hz if sample_hz else 1.0)
            else:
                assert sample_hz is not None  # without it, only samples: raised above
                weights[stack] += _from_ns(n * 1e9 / sample_hz, unit, out_freq)
    if not full_names:
        short: dict[str, float] = defaultdict(float)
        for stack, weight in weights.items():
            short[shorten_stack(stack)] += weight
        weights = short
    lines = sorted(weights.items())
    return FoldedStacks(lines, unit, gpu_ns, cpu_samples)


def _from_ns(ns: float, unit: str, freq: float) -> float:
    if unit == "ns":
        return ns
    if unit == "us":
        return ns / 1e3
    return ns * freq / 1e9
