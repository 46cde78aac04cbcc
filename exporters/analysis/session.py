"""The analysis session of one opened trace: what the analyses derive from the trace once
and share (the GPU ops and their busy islands as arrays, busy.py), kept on the Trace
itself (`Trace.analysis_session`), so it lives and dies with the opened trace and no
module holds state keyed by traces.

Its contents depend on the analysis tables loaded into that trace (the analysed regions
of span.sql); tables.load refuses a second scope on one trace, so they never change under
it.  No numpy here: `folded` reaches the analysis facade without loading it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from exporters.perfetto.engine.trace_processor import Trace

if TYPE_CHECKING:
    from exporters.analysis.busy import GpuBusy
    from exporters.analysis.follow import Activity


class AnalysisSession:
    """What the analyses of one trace computed, each part None until first needed."""

    def __init__(self) -> None:
        self.gpu_busy: GpuBusy | None = None  # busy.gpu_busy fills it
        # follow.py's answers by question ("loader_workers"): the findings and --annotate's
        # marks both ask what the DataLoader workers ran.
        self.followed: dict[str, Activity | None] = {}


def session_of(trace: Trace) -> AnalysisSession:
    """The trace's analysis session, started at the first analysis that needs one."""
    found = trace.analysis_session
    if not isinstance(found, AnalysisSession):
        found = trace.analysis_session = AnalysisSession()
    return found
