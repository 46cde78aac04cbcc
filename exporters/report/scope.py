"""The span the stacks cover (`folded`, `flamegraph`, the report's flamegraph): by default the
one the findings cover, so the flamegraph shows the time the findings explain, not imports
and set-up (issue 35).

- steps: the steady state, from each process's second step (the analysis's focus), else
  the active span where fewer than three steps are found;
- active: the first GPU op to the end of the last;
- all: the whole trace (or the whole capture window of --window).
"""

from __future__ import annotations

from dataclasses import dataclass

from exporters.analysis.tables import Scope, load_steps
from exporters.folded.folded import FoldedStacks
from exporters.perfetto.engine.trace_processor import Trace
from exporters.perfetto.engine.views import load_views
from exporters.report import units
from exporters.report.step_words import steps_in

SPANS = ("steps", "active", "all")
SPAN_HELP = (
    "the time the stacks cover: steps (default), the steady state the findings cover, from "
    "each process's second step (the active span where fewer than three steps are found); "
    "active, the first GPU op to the end of the last; all, the whole trace"
)


@dataclass(frozen=True)
class StackSpan:
    between: tuple[int, int] | None  # [lo, hi) in trace ns; None: everything
    what: str  # said to the user: which span, how long
    short: str = "the whole trace"  # which span, in a title: `steps 2-12 of 2 processes`

    @property
    def scope(self) -> Scope:
        """The analysis scope the span was read from (idle stacks reuse it)."""
        return Scope(span_all=self.between is None)


def stack_span(
    trace: Trace, span: str, window: int | None = None, steps_glob: str | None = None
) -> StackSpan:
    """The span `span` (one of SPANS) of an opened trace; loads the analysis's span and steps
    unless `all`."""
    if span not in SPANS:
        raise ValueError(f"unknown span {span!r}")
    if span == "all":
        whole = "the whole trace" if window is None else f"capture window {window}"
        return StackSpan(None, whole, whole)
    # The span and the steps alone (not the gaps the findings need): the span costs
    # `folded` little over `--span all`.
    load_views(trace, window)
    load_steps(trace, Scope(span_all=False, steps_glob=steps_glob))
    active = trace.query("select ts, end_ts from xpu_analysis_span")[0]
    focus = trace.query("select ts, end_ts, kind from xpu_analysis_focus")[0]
    if span == "steps" and focus["kind"] == "steps":
        lo, hi = int(focus["ts"]), int(focus["end_ts"])
        steps = steps_in(trace, lo, hi)
        return StackSpan(
            (lo, hi),
            f"{steps}, the steady state the findings cover "
            f"({units.duration(hi - lo)}; --span all: the whole trace)",
            steps,
        )
    lo, hi = int(active["ts"]), int(active["end_ts"])
    fewer = " (fewer than 3 steps)" if span == "steps" else ""
    return StackSpan(
        (lo, hi + 1),  # the last op ends at hi: its samples there count
        f"the active span{fewer}, first GPU op to the end of the last "
        f"({units.duration(hi - lo)}; --span all: the whole trace)",
        "the active span",
    )


def describe_weights(mode: str, stacks: FoldedStacks) -> str:
    """What folded lines weigh, in the mode's terms (`GPU idle 0.84 s` for idle, not a GPU
    time of 0 and no samples)."""
    if mode == "idle":
        return f"GPU idle {units.duration(stacks.gpu_weight_ns)}"
    parts = []
    if mode in ("gpu", "merge"):
        parts.append(f"GPU {units.duration(stacks.gpu_weight_ns)}")
    if mode in ("cpu", "merge"):
        parts.append(f"{stacks.cpu_samples:,} CPU samples")
    return ", ".join(parts)
