"""Loads the analysis tables (span.sql, steps.sql, busy.py's gap openings, gaps.sql,
step_busy.py) into an opened trace, once; the span and steps alone with load_steps.

Needs the shared views (exporters/perfetto/engine/views.py).  The tables depend on the span asked
for and on how steps are found, so a trace holds one set of them; a second load must ask
for the same."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporters.analysis.step_ranges import DEFAULT_STEPS, StepChoice, StepsError, choose
from exporters.folded.folded import recorded_frequency
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace

__all__ = ["DEFAULT_SCOPE", "DEFAULT_STEPS", "Scope", "StepsError", "load", "load_steps"]
# A host part shorter than this between two launches is the launch path itself.
LAUNCH_HOST_NS = 50_000
# In a host part shorter than SHORT_PERIODS sampling periods (too short for the samples to
# say what ran), time no sample covers takes the class of the thread's last sample at most
# STALE_NS old; in a longer one it is "other".
STALE_NS = 1_000_000_000
SHORT_PERIODS = 2
# A Python line on at least this share of a thread's launch stacks is the loop around the
# work, not a line that launches it (gaps.sql, _xpu_gap_launch_callsite).
LOOP_SHARE = 0.9
SPAN = "analysis.span"
STEPS_SCOPE = "analysis.steps_scope"
SCOPE_TABLE = "analysis.scope"


@dataclass(frozen=True)
class Scope:
    """What the tables were built for: the whole trace or the active span, and the glob of
    marked steps (None: ProfilerStep#* where the trace has them, else a repeating range,
    else none; step_ranges.py)."""

    span_all: bool = False
    steps_glob: str | None = None
    detect_steps: bool = True


DEFAULT_SCOPE = Scope()


def sample_period_ns(trace: Trace) -> int:
    """The CPU sampling period, 0 where the trace has no timer samples' frequency."""
    freq = recorded_frequency(trace)
    return int(1e9 / freq) if freq else 0


def _refuse_another_scope(loaded: Mapping[str, object], scope: Scope) -> None:
    """One trace's analysis tables hold one scope: a second, different one is refused."""
    if (loaded["span_all"], loaded["asked_steps"], loaded["detect"]) != (
        scope.span_all,
        scope.steps_glob or "",
        scope.detect_steps,
    ):
        raise ValueError("analysis tables already loaded for another scope")


def load_steps(trace: Trace, scope: Scope = DEFAULT_SCOPE) -> StepChoice:
    """The span, its GPU ops, the steps and the focus (the span the findings cover: what
    `folded`, `flamegraph` and `view` need), without the gaps, a third of the analysis's
    cost at 1M slices (docs/benchmarks.md); once per trace: `load` builds the rest on them."""
    loaded = sql_modules.loaded(trace, STEPS_SCOPE)
    if loaded is not None:
        _refuse_another_scope(loaded, scope)
        return StepChoice(str(loaded["chosen_steps"]), str(loaded["steps_how"]))
    # `report --ranks` loads span.sql (of the active span) before its table and then this.
    span = sql_modules.loaded(trace, SPAN)
    if span is not None and span["span_all"] != scope.span_all:
        raise ValueError("analysis tables already loaded for another scope")
    sql_modules.load(trace, SPAN, span_all=scope.span_all)
    chosen = choose(trace, scope.steps_glob)
    sql_modules.load(
        trace,
        STEPS_SCOPE,
        detect=scope.detect_steps,
        steps_glob=chosen.glob,
        steps_on=bool(chosen.glob),
        span_all=scope.span_all,
        asked_steps=scope.steps_glob or "",
        chosen_steps=chosen.glob,
        steps_how=chosen.how,
    )
    return chosen


def load(trace: Trace, scope: Scope = DEFAULT_SCOPE) -> None:
    """Create the analysis tables for `scope` (the shared views must be loaded)."""
    loaded = sql_modules.loaded(trace, SCOPE_TABLE)
    if loaded is not None:
        _refuse_another_scope(loaded, scope)
        return
    from exporters.analysis import busy, step_busy  # numpy: not for a cached `folded`

    chosen = load_steps(trace, scope)
    sql_modules.once(trace, "_xpu_op_opening", busy.create_openings)  # gaps lie between islands
    period = sample_period_ns(trace)
    sql_modules.load(
        trace,
        "analysis.focus_gap",
        short_ns=SHORT_PERIODS * period,
        loop_share=LOOP_SHARE,
        period=period,
        stale_ns=STALE_NS,
        launch_host_ns=LAUNCH_HOST_NS,
    )
    step_busy.create(trace)
    sql_modules.load(
        trace,
        SCOPE_TABLE,
        span_all=scope.span_all,
        asked_steps=scope.steps_glob or "",
        detect=scope.detect_steps,
        steps_how=chosen.how,
    )
