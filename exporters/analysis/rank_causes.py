"""Per rank (process): the same model as the report's, cut by the process that launched
the work: its GPUs' idle gaps by cause (gaps.sql, the launching thread's process), its top
cause with the line, and its steps (steps.sql's, per process).  For `report --ranks`."""

from __future__ import annotations

from dataclasses import dataclass

from exporters.analysis import causes, idle
from exporters.analysis.idle import Site
from exporters.perfetto.engine.trace_processor import Trace


@dataclass(frozen=True)
class RankCause:
    upid: int
    idle_ns: int
    by_class: dict[str, int]
    top: str  # the cause (causes.CAUSES key) with the most idle time, '' where none
    location: str  # where its time goes ('' where the trace cannot say)
    steps: int
    step_mean_ns: int | None

    def describe(self) -> str:
        if not self.top:
            return "no GPU idle time of its own"
        share = self.by_class[self.top] / self.idle_ns if self.idle_ns else 0.0
        where = f" at {self.location}" if self.location else ""
        return (
            f"its top cause of GPU idle: {causes.BY_KEY[self.top].label}{where} "
            f"({100 * share:.0f}% of its idle time)"
        )


def _gaps(upid: int) -> str:
    return (
        "(SELECT * FROM xpu_focus_gap WHERE utid IN "
        f"(SELECT utid FROM thread WHERE upid = {int(upid)}))"
    )


def _location(trace: Trace, cls: str, gaps: str) -> str:
    found: list[Site] = []
    if cls == "sync":
        found = idle.sync_sites(trace, 1, gaps)
    elif cls == "data_loading":
        found = idle.sample_sites(trace, "data", top=1, gaps=gaps) + idle.wait_sites(
            trace, True, 1, gaps
        )
    elif cls == "host_compute":
        found = idle.sample_sites(trace, "host", top=1, gaps=gaps)
    elif cls == "wait":
        found = idle.wait_sites(trace, False, 1, gaps)
    elif cls == "launch":
        found = idle.sample_sites(trace, "launch", top=1, gaps=gaps) + idle.launch_sites(
            trace, 1, gaps
        )
    found = sorted(found, key=lambda s: -s.ns)
    return found[0].location if found else ""


def rank_causes(trace: Trace) -> dict[int, RankCause]:
    """Per process that launched GPU work (analysis tables loaded)."""
    columns = ", ".join(f"coalesce(sum(g.{c}), 0) as {c}" for c in causes.COLUMNS.values())
    rows = trace.query(
        f"select t.upid, coalesce(sum(g.dur), 0) as idle, {columns} from xpu_focus_gap g "
        "join thread t using (utid) group by t.upid"
    )
    steps = {
        int(r["upid"]): (int(r["n"]), int(r["mean"]))
        for r in trace.query(
            "select upid, count(*) as n, avg(dur) as mean from xpu_step group by upid"
        )
    }
    out: dict[int, RankCause] = {}
    for r in rows:
        upid = int(r["upid"])
        by_class = {k: int(r[c]) for k, c in causes.COLUMNS.items()}
        named = {k: v for k, v in by_class.items() if k != "other" and v > 0}
        top = max(named, key=lambda k: named[k]) if named else ""
        n, mean = steps.get(upid, (0, None))
        out[upid] = RankCause(
            upid=upid,
            idle_ns=int(r["idle"]),
            by_class=by_class,
            top=top,
            location=_location(trace, top, _gaps(upid)) if top else "",
            steps=n,
            step_mean_ns=mean,
        )
    for upid, (n, mean) in steps.items():
        out.setdefault(upid, RankCause(upid, 0, {}, "", "", n, mean))
    return out
