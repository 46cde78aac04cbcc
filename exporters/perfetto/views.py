"""Loads the shared SQL views (xpu_views.sql) into an opened trace, once."""

from __future__ import annotations

from importlib import resources

from exporters.perfetto.trace_processor import Trace


def load_views(trace: Trace) -> None:
    if trace.scalar("select count(*) from sqlite_master where name = 'xpu_metadata'"):
        return
    trace.execute(resources.files("exporters.perfetto").joinpath("xpu_views.sql").read_text())
