"""The report's "Top functions (CPU samples)": CPU time by function, not by whole stack.

A function spread over many stacks (called from many places, or above different leaves)
is one row: its self share (samples where it is the innermost frame) and its total share
(samples with it anywhere on the stack, counted once per sample however often it recurs).
Python functions are `func (file.py)` (all lines of the function together), native ones
their symbol (short C++ names unless --full-names).  Stacks are read as users see them
(exporters/folded/frames.py: the interpreter's frames between Python frames hidden unless
--all-frames), so CPython's call machinery does not crowd out the program's functions.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field

from collector import frames as predicates
from collector.frame_names import short_name
from collector.frames import FrameRef, apply_filters
from exporters.folded.frames import folded_frames
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace

TITLE = "Top functions by self time (CPU samples)"
TOTAL_TITLE = "Top functions by total time (CPU samples)"
_LINE = re.compile(r":\d+\)$")


@dataclass
class _Tally:
    self_samples: int = 0
    total_samples: int = 0
    threads: set[str] = field(default_factory=set)


def function_key(name: str, module: str, full_names: bool) -> str:
    """The function a frame belongs to: a Python frame without its line, a native frame by
    its (short) symbol."""
    if predicates.is_python_frame(name, module):
        return _LINE.sub(")", name)
    return name if full_names else short_name(name)


def rank_functions(
    stacks: list[tuple[str, str | None, int]], full_names: bool = False, all_frames: bool = False
) -> list[dict[str, object]]:
    """Rows (function, thread, self/total samples and % of all samples) for folded CPU
    stacks `thread;outer;...;leaf` with their modules and sample counts, most self time
    first (then most total)."""
    tally, all_samples = _tally(stacks, full_names, all_frames)
    return _rows(tally, all_samples, by_total=False)


def _tally(
    stacks: list[tuple[str, str | None, int]], full_names: bool, all_frames: bool
) -> tuple[dict[str, _Tally], int]:
    """Self and total samples and threads per function, and all samples."""
    tally: dict[str, _Tally] = defaultdict(_Tally)
    all_samples = 0
    for stack, modules, samples in stacks:
        frames = apply_filters(folded_frames(stack, modules), show_all=all_frames)
        thread, body = frames[0][0], frames[1:]
        if not all_frames:
            body = _python_owns_interpreter_work(body)
        all_samples += samples
        if not body:
            continue
        keys = [function_key(name, module, full_names) for name, module in body]
        tally[keys[-1]].self_samples += samples
        for key in set(keys):
            tally[key].total_samples += samples
            tally[key].threads.add(thread)
    return tally, all_samples


def _python_owns_interpreter_work(body: list[FrameRef]) -> list[FrameRef]:
    """The interpreter's own frames under the innermost Python frame (its allocator, its
    integer arithmetic: the cost of running that function's lines) left out, so the Python
    function holds their time as its self time, as a Python profiler shows it.  Where a
    CPython with symbols named them, `_PyObject_Malloc` under the hot loop held as many
    self samples as the loop's function, and topped the table half the time."""
    end = len(body)
    while end > 0 and predicates.is_interpreter_frame(*body[end - 1]):
        end -= 1
    if 0 < end < len(body) and predicates.is_python_frame(*body[end - 1]):
        return body[:end]
    return body


def _rows(
    tally: dict[str, _Tally], all_samples: int, by_total: bool, top: int | None = None
) -> list[dict[str, object]]:
    """The functions' rows, most self time first (then most total), or `by_total` most
    total time first (then most self); then by name.  The first `top` only, if given."""
    if not all_samples:
        return []

    def order(item: tuple[str, _Tally]) -> tuple[int, int, str]:
        key, t = item
        if by_total:
            return (-t.total_samples, -t.self_samples, key)
        return (-t.self_samples, -t.total_samples, key)

    return [
        {
            "function": key,
            "thread": next(iter(t.threads))
            if len(t.threads) == 1
            else f"all threads ({len(t.threads)})",
            "self_samples": t.self_samples,
            "self_pct": 100.0 * t.self_samples / all_samples,
            "total_pct": 100.0 * t.total_samples / all_samples,
        }
        for key, t in sorted(tally.items(), key=order)[:top]
    ]


@dataclass
class TopFunctions:
    by_self: list[dict[str, object]]
    by_total: list[dict[str, object]]
    scope: str  # what the rankings cover, for the sections' note


def top_functions(
    trace: Trace, span_all: bool, top: int, full_names: bool = False, all_frames: bool = False
) -> TopFunctions:
    """The `top` functions of a trace whose stack tables and analysis are loaded
    (top_functions.sql) by self time (where the CPU works), and by total time (what the
    time is spent under: the training step, the data loading), over the analysis's focus
    (every sample with `span_all`)."""
    rows = sql_modules.rows(trace, "report.top_functions", span_all=span_all)
    stacks = [(r["stack"], r["modules"], int(r["samples"])) for r in rows]
    tally, all_samples = _tally(stacks, full_names, all_frames)
    by_self = _rows(tally, all_samples, by_total=False, top=top)
    by_total = _rows(tally, all_samples, by_total=True, top=top)
    return TopFunctions(by_self, by_total, _scope(trace, sum(n for *_, n in stacks)))


def _scope(trace: Trace, ranked: int) -> str:
    everything = int(trace.scalar("select count(*) from xpu_cpu_sample") or 0)
    kind = trace.scalar("select kind from xpu_analysis_focus")
    if ranked == everything:
        return "all CPU samples"
    what = {
        "steps": "the steady state (from each process's second step)",
        "active": "the active span (first GPU op to the end of the last)",
    }.get(str(kind), "the analysed span")
    return (
        f"{what}: {ranked:,} of {everything:,} CPU samples; the other "
        f"{everything - ranked:,} (set-up such as imports and model construction, the "
        "end) with --span all"
    )
