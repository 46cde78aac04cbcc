"""`folded --mode idle` / `flamegraph --mode idle`: what the CPU did while the GPU waited,
as folded stacks weighted by GPU idle time (ns).

Each gap's time goes to the launching thread's stacks, part by part (gaps.sql): its samples
share the host parts they explain (data, other host code, launching code) in proportion to
what they cover, its waits the wait parts (`[waiting in <call>]` on the wait's stack), the
sync part goes to the blocking call's launch stack (`[waiting in <API>]`), the launch path to
the next launch's stack (`[launch] <op>`), the rest to `[GPU idle: other]`."""

from __future__ import annotations

from collections import defaultdict

from collector.frame_names import shorten_stack
from exporters.analysis.analyze import load
from exporters.analysis.tables import DEFAULT_SCOPE, Scope
from exporters.folded.folded import MODES as FOLD_MODES
from exporters.folded.folded import FoldedError, FoldedStacks, fold, load_stack_tables
from exporters.folded.frames import filter_folded
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace


def fold_idle(
    trace: Trace,
    full_names: bool = False,
    window: int | None = None,
    scope: Scope = DEFAULT_SCOPE,
    all_frames: bool = False,
    focus: bool = False,
) -> FoldedStacks:
    """The idle stacks of the gaps in the analysed span, or (`focus`) of those the findings
    and the report's idle table count (xpu_focus_gap); frames read as the other modes show
    them (filtered unless all_frames). gpu_weight_ns: the GPU idle time behind the lines."""
    load(trace, scope, window)
    load_stack_tables(trace, window)
    weights: dict[str, float] = defaultdict(float)
    gaps = "xpu_focus_gap" if focus else "xpu_gpu_gap"
    for row in sql_modules.rows(trace, "analysis.idle_stacks", gaps=gaps):
        stack = filter_folded(str(row["stack"]), row["modules"], all_frames)
        weights[stack if full_names else shorten_stack(stack)] += float(row["weight_ns"])
    lines = sorted((s, round(w)) for s, w in weights.items())
    return FoldedStacks(lines, "ns", round(sum(weights.values())), 0)


MODES = (*FOLD_MODES, "idle")


def fold_mode(
    trace: Trace,
    mode: str,
    unit: str = "ns",
    freq: float | None = None,
    full_names: bool = False,
    window: int | None = None,
    all_frames: bool = False,
    between: tuple[int, int] | None = None,
    focus: bool = False,
) -> FoldedStacks:
    """`fold()` for its modes (GPU ops and samples in `between` where given), `fold_idle()`
    for `idle` (ns or us; samples mean nothing for idle time): the gaps of the whole trace
    where `between` is None, else of the active span, only those the findings count with
    `focus`."""
    if mode != "idle":
        return fold(
            trace,
            mode,
            unit,
            freq,
            full_names=full_names,
            window=window,
            all_frames=all_frames,
            between=between,
        )
    if unit == "samples":
        raise FoldedError("--mode idle is weighted by GPU idle time: use --unit ns or us")
    scope = Scope(span_all=between is None)
    stacks = fold_idle(trace, full_names, window, scope, all_frames, focus)
    if unit == "us":
        stacks = FoldedStacks(
            [(s, w / 1000) for s, w in stacks.lines], "us", stacks.gpu_weight_ns, 0
        )
    return stacks
