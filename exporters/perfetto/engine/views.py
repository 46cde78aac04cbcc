"""Loads the shared SQL views (scope.sql, then xpu_views.sql) into an opened trace, once.

The views look at the whole trace or, with a window number, at that capture window of each
process; every reader (folded, report, query) then sees the same part of the trace."""

from __future__ import annotations

from importlib import resources

from exporters.perfetto.engine.trace_processor import Trace


class WindowError(Exception):
    """The asked-for capture window is not in the trace; one line for the user."""


def _sql(name: str) -> str:
    return resources.files("exporters.perfetto.engine").joinpath(name).read_text()


def load_views(trace: Trace, window: int | None = None, gpu_op_table: bool = False) -> None:
    """The views over the whole trace, or over capture window `window` (1-based, per
    process).  A trace's views are loaded once: a second call must ask for the same scope.
    gpu_op_table: xpu_gpu_op made a table (the same rows) instead of a view, for a reader
    that asks it many times (report: each look at the view joins the slices with the
    flows again; once is a look's cost)."""
    if window is not None and window < 1:
        raise WindowError("--window counts from 1")
    number = window or 0
    if trace.scalar("select count(*) from sqlite_master where name = 'xpu_metadata'"):
        loaded = trace.scalar("select window from xpu_scope_window")
        if loaded != number:
            raise ValueError(f"views already loaded for window {loaded}, not {number}")
        return
    trace.execute(_sql("scope.sql").replace("{window}", str(number)))
    trace.execute(f"create perfetto table xpu_scope_window as select {number} as window")
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
    views = _sql("xpu_views.sql").replace("{whole_trace}", "1" if window is None else "0")
    if gpu_op_table:
        views = views.replace(
            "CREATE PERFETTO VIEW xpu_gpu_op AS", "CREATE PERFETTO TABLE xpu_gpu_op AS"
        )
    trace.execute(views)
