"""Loads the analysis tables (span.sql, steps.sql, busy.py's gap openings, gaps.sql,
step_busy.py) into an opened trace, once; the span and steps alone with load_steps.

Needs the shared views (exporters/perfetto/engine/views.py).  The tables depend on the span asked
for and on how steps are found, so a trace holds one set of them; a second load must ask
for the same."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from exporters.analysis.step_ranges import DEFAULT_STEPS, StepChoice, StepsError, choose
from exporters.folded.folded import recorded_frequency
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


@dataclass(frozen=True)
class Scope:
    """What the tables were built for: the whole trace or the active span, and the glob of
    marked steps (None: ProfilerStep#* where the trace has them, else a repeating range,
    else none; step_ranges.py)."""

    span_all: bool = False
    steps_glob: str | None = None
    detect_steps: bool = True


DEFAULT_SCOPE = Scope()


def _sql(name: str) -> str:
    return resources.files("exporters.analysis").joinpath(name).read_text()


def _glob_literal(glob: str) -> str:
    return glob.replace("'", "''")


def sample_period_ns(trace: Trace) -> int:
    """The CPU sampling period, 0 where the trace has no timer samples' frequency."""
    freq = recorded_frequency(trace)
    return int(1e9 / freq) if freq else 0


def span_sql(span_all: bool = False) -> str:
    """span.sql alone (the span and the GPU ops in it), for scripts that need only those."""
    return _sql("span.sql").replace("{span_all}", "1" if span_all else "0")


# The gaps the findings explain: those starting in the focus (steps.sql), once the gaps are.
_FOCUS_GAP = """
CREATE PERFETTO VIEW xpu_focus_gap AS
SELECT g.* FROM xpu_gpu_gap g, xpu_analysis_focus f
WHERE g.ts >= f.ts AND g.ts < f.end_ts
"""


def _params(trace: Trace, scope: Scope) -> dict[str, str]:
    period = sample_period_ns(trace)
    return {
        "{short_ns}": str(SHORT_PERIODS * period),
        "{loop_share}": str(LOOP_SHARE),
        "{span_all}": "1" if scope.span_all else "0",
        "{period}": str(period),
        "{stale_ns}": str(STALE_NS),
        "{launch_host_ns}": str(LAUNCH_HOST_NS),
        "{detect}": "1" if scope.detect_steps else "0",
    }


def _execute(trace: Trace, name: str, params: dict[str, str]) -> None:
    text = _sql(name)
    for key, value in params.items():
        text = text.replace(key, value)
    trace.execute(text)


def load_steps(trace: Trace, scope: Scope = DEFAULT_SCOPE) -> StepChoice:
    """span.sql and steps.sql alone: the span, its GPU ops, the steps and the focus (the span
    the findings cover: what `folded`, `flamegraph` and `view` need), without the gaps, a
    third of the analysis's cost at 1M slices (docs/benchmarks.md); once per trace: `load`
    builds the rest on them."""
    if trace.scalar("select count(*) from sqlite_master where name = '_xpu_steps_scope'"):
        loaded = trace.query(
            "select span_all, steps_glob, detect, chosen, how from _xpu_steps_scope"
        )[0]
        if (bool(loaded["span_all"]), loaded["steps_glob"], bool(loaded["detect"])) != (
            scope.span_all,
            scope.steps_glob or "",
            scope.detect_steps,
        ):
            raise ValueError("analysis tables already loaded for another scope")
        return StepChoice(str(loaded["chosen"]), str(loaded["how"]))
    params = _params(trace, scope)
    # `report --ranks` runs span.sql (of the active span) before its table and then this.
    span_loaded = bool(
        trace.scalar("select count(*) from sqlite_master where name = 'xpu_analysis_span'")
    )
    if span_loaded and scope.span_all:
        raise ValueError("analysis tables already loaded for another scope")
    if not span_loaded:
        _execute(trace, "span.sql", params)
    chosen = choose(trace, scope.steps_glob)
    params["{steps_glob}"] = _glob_literal(chosen.glob)
    params["{steps_on}"] = "1" if chosen.glob else "0"
    _execute(trace, "steps.sql", params)
    trace.execute(
        "create perfetto table _xpu_steps_scope as select "
        f"{int(scope.span_all)} as span_all, '{_glob_literal(scope.steps_glob or '')}' "
        f"as steps_glob, {int(scope.detect_steps)} as detect, "
        f"'{_glob_literal(chosen.glob)}' as chosen, '{_glob_literal(chosen.how)}' as how"
    )
    return chosen


def load(trace: Trace, scope: Scope = DEFAULT_SCOPE) -> None:
    """Create the analysis tables for `scope` (the shared views must be loaded)."""
    if trace.scalar("select count(*) from sqlite_master where name = 'xpu_analysis_scope'"):
        loaded = trace.query("select span_all, steps_glob, detect from xpu_analysis_scope")[0]
        if (bool(loaded["span_all"]), loaded["steps_glob"], bool(loaded["detect"])) != (
            scope.span_all,
            scope.steps_glob or "",
            scope.detect_steps,
        ):
            raise ValueError("analysis tables already loaded for another scope")
        return
    from exporters.analysis import busy, step_busy  # numpy: not for a cached `folded`

    if not trace.scalar("select count(*) from sqlite_master where name = 'xpu_wait'"):
        trace.execute(_sql("wait_view.sql"))
    chosen = load_steps(trace, scope)
    busy.create_openings(trace)  # the gaps lie between busy islands
    _execute(trace, "gaps.sql", _params(trace, scope))
    trace.execute(_FOCUS_GAP)
    step_busy.create(trace)
    trace.execute(
        "create perfetto table xpu_analysis_scope as select "
        f"{int(scope.span_all)} as span_all, '{_glob_literal(scope.steps_glob or '')}' "
        f"as steps_glob, {int(scope.detect_steps)} as detect, "
        f"'{_glob_literal(chosen.how)}' as steps_how"
    )
