"""Loads the shared SQL views (scope.sql, then xpu_views.sql) into an opened trace, once.

The views look at the whole trace or, with a window number, at that capture window of each
process; every reader (folded, report, query) then sees the same part of the trace."""

from __future__ import annotations

from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace

SCOPE = "perfetto.engine.scope"
VIEWS = "perfetto.engine.xpu_views"


class WindowError(Exception):
    """The asked-for capture window is not in the trace; one line for the user."""


def load_views(trace: Trace, window: int | None = None, gpu_op_table: bool = False) -> None:
    """The views over the whole trace, or over capture window `window` (1-based, per
    process).  A trace's views are loaded once: a second call must ask for the same scope.
    gpu_op_table: xpu_gpu_op made a table (the same rows) instead of a view, for a reader
    that asks it many times (report: each look at the view joins the slices with the
    flows again; once is a look's cost)."""
    if window is not None and window < 1:
        raise WindowError("--window counts from 1")
    number = window or 0
    views = sql_modules.loaded(trace, VIEWS)
    if views is not None:
        scope = sql_modules.loaded(trace, SCOPE) or {}
        if scope.get("window") != number:
            raise ValueError(f"views already loaded for window {scope.get('window')}, not {number}")
        return
    sql_modules.load(trace, SCOPE, window=number)
    if window is not None:
        most = trace.scalar("select max(window_no) from xpu_window")
        if not most:
            raise WindowError(
                "the trace has no capture windows (record it with --capture-range, --delay "
                "or --duration); drop --window"
            )
        if window > most:
            raise WindowError(
                f"the trace has {most} capture window{'s' if most > 1 else ''} per process "
                f"at most; --window takes 1..{most}"
            )
    sql_modules.load(
        trace, VIEWS, whole_trace=window is None, gpu_op_as="TABLE" if gpu_op_table else "VIEW"
    )
