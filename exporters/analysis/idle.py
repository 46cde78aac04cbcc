"""GPU idle gaps: how much of the span each cause explains, and where in the code.

Reads the tables of gaps.sql; the classes and how a gap is split among them are documented
there."""

from __future__ import annotations

from dataclasses import dataclass

from exporters.analysis import locations
from exporters.perfetto.trace_processor import Trace

CLASSES = ("sync", "data_loading", "host_compute", "launch", "other")


@dataclass(frozen=True)
class Site:
    """A place in the code and the idle time (ns) it stands for."""

    location: str
    ns: int
    count: int
    detail: str = ""  # the API call (sync), the kernel (launch)


@dataclass(frozen=True)
class IdleSummary:
    gaps: int
    idle_ns: int
    by_class: dict[str, int]  # ns per class (the parts of every gap)
    gaps_by_class: dict[str, int]  # gaps whose largest part is the class
    longest: list[dict[str, object]]  # the longest gaps


def summary(trace: Trace, longest: int = 5) -> IdleSummary:
    row = trace.query(
        "select count(*) as n, coalesce(sum(dur), 0) as idle, "
        + ", ".join(f"coalesce(sum({c}), 0) as {c}" for c in _COLUMNS.values())
        + " from xpu_focus_gap"
    )[0]
    counted = {
        r["class"]: int(r["n"])
        for r in trace.query("select class, count(*) as n from xpu_focus_gap group by class")
    }
    top = trace.query(
        "select g.ts, g.dur, g.device, g.class, g.next_op, g.api_name, g.block_name "
        f"from xpu_focus_gap g order by g.dur desc limit {int(longest)}"
    )
    return IdleSummary(
        gaps=int(row["n"]),
        idle_ns=int(row["idle"]),
        by_class={c: int(row[col]) for c, col in _COLUMNS.items()},
        gaps_by_class=counted,
        longest=top,
    )


_COLUMNS = {
    "sync": "sync_ns",
    "data_loading": "data_ns",
    "host_compute": "host_ns",
    "launch": "launch_ns",
    "other": "other_ns",
}


def sync_sites(trace: Trace, top: int = 3) -> list[Site]:
    """The blocking calls the GPU ran dry behind, by the line that made them."""
    rows = trace.query(
        """
        WITH b AS MATERIALIZED (
          SELECT g.block_id, g.block_name, g.sync_ns, s.ts, g.utid
          FROM xpu_focus_gap g JOIN slice s ON s.id = g.block_id WHERE g.sync_ns > 0
        ),
        ls AS MATERIALIZED (
          SELECT utid, ts, callsite_id FROM xpu_launch_stack WHERE ts IN (SELECT ts FROM b)
        )
        SELECT b.block_id, b.block_name, b.sync_ns, ls.callsite_id
        FROM b LEFT JOIN ls ON ls.utid = b.utid AND ls.ts = b.ts
        """
    )
    return _sites(trace, rows, "block_id", "sync_ns", "block_name", top)


def launch_sites(trace: Trace, top: int = 3) -> list[Site]:
    """The launches the GPU waited for, by the line that made them."""
    return next_call_sites(trace, "launch_ns", top)


def next_call_sites(trace: Trace, part: str, top: int = 3) -> list[Site]:
    """The launches that ended gaps with time in `part` (a column of xpu_gpu_gap), by the
    line that made them, weighted by that time."""
    rows = trace.query(
        f"""
        WITH a AS MATERIALIZED (
          SELECT g.api_id, g.next_op, g.{part} AS launch_ns, s.ts, g.utid
          FROM xpu_focus_gap g JOIN slice s ON s.id = g.api_id WHERE g.{part} > 0
        ),
        ls AS MATERIALIZED (
          SELECT utid, ts, callsite_id FROM xpu_launch_stack WHERE ts IN (SELECT ts FROM a)
        )
        SELECT a.api_id, a.next_op, a.launch_ns, ls.callsite_id
        FROM a LEFT JOIN ls ON ls.utid = a.utid AND ls.ts = a.ts
        """
    )
    return _sites(trace, rows, "api_id", "launch_ns", "next_op", top)


def sample_sites(trace: Trace, data: bool, top: int = 3) -> list[Site]:
    """Where the launching thread's samples in the gaps ran: input-pipeline code (`data`)
    or other host code, by the line users wrote."""
    part = "data_ns" if data else "host_ns"
    rows = trace.query(
        f"""
        SELECT s.callsite_id, sum(s.covered_ns) AS ns, count(*) AS n
        FROM _xpu_gap_sample s JOIN xpu_focus_gap g ON g.id = s.gap_id
        WHERE g.{part} > 0 AND s.is_data = {1 if data else 0}
        GROUP BY s.callsite_id
        """
    )
    if not rows:
        # No samples in the gaps (converted traces, --no-cpu): the code that made the next
        # launch, from its launch stack or the CPU slices around it.
        return next_call_sites(trace, part, top)
    frames = locations.callsite_frames(trace, (r["callsite_id"] for r in rows))
    weights: dict[str, list[int]] = {}
    for r in rows:
        loc = (
            _data_location(frames.get(int(r["callsite_id"]), []))
            if data
            else (locations.location(frames.get(int(r["callsite_id"]), [])))
        )
        w = weights.setdefault(loc, [0, 0])
        w[0] += int(r["ns"])
        w[1] += int(r["n"])
    return _top(weights, top)


def _data_location(frames: list[locations.Frame]) -> str:
    """The dataset code of an input-pipeline stack: the innermost user frame, which is the
    dataset's own code when the pipeline calls into it."""
    return locations.location(frames)


def _sites(
    trace: Trace,
    rows: list[dict[str, object]],
    id_key: str,
    ns_key: str,
    detail_key: str,
    top: int,
) -> list[Site]:
    with_stack = [r for r in rows if r["callsite_id"] is not None]
    frames = locations.callsite_frames(trace, (r["callsite_id"] for r in with_stack))
    # Without launch stacks (converted traces): the enclosing CPU slices, for the heaviest
    # calls only (one query each).
    without = sorted((r for r in rows if r["callsite_id"] is None), key=lambda r: -int(r[ns_key]))[
        :200
    ]
    by_slice = locations.slice_locations(trace, (int(r[id_key]) for r in without))
    weights: dict[str, list[int]] = {}
    details: dict[str, dict[str, int]] = {}
    for r in with_stack + without:
        if r["callsite_id"] is not None:
            loc = locations.location(frames.get(int(r["callsite_id"]), []))
        else:
            loc = by_slice.get(int(r[id_key]), "")
        if not loc:
            continue
        w = weights.setdefault(loc, [0, 0])
        w[0] += int(r[ns_key])
        w[1] += 1
        d = details.setdefault(loc, {})
        d[str(r[detail_key])] = d.get(str(r[detail_key]), 0) + int(r[ns_key])
    sites = _top(weights, top)
    return [
        Site(s.location, s.ns, s.count, max(details[s.location].items(), key=lambda kv: kv[1])[0])
        for s in sites
    ]


def _top(weights: dict[str, list[int]], top: int) -> list[Site]:
    ranked = sorted(weights.items(), key=lambda kv: -kv[1][0])[:top]
    return [Site(loc, ns, n) for loc, (ns, n) in ranked if loc]


def op_sites(trace: Trace, where: str, top: int = 3) -> list[Site]:
    """The launch sites of the GPU ops (xpu_launch rows) matching `where`, by GPU time."""
    rows = trace.query(
        f"""
        WITH a AS MATERIALIZED (
          SELECT l.api_id, l.name, l.dur AS ns, l.api_ts AS ts, tt.utid
          FROM xpu_launch l JOIN slice s ON s.id = l.api_id
          JOIN thread_track tt ON tt.id = s.track_id
          WHERE ({where})
            AND l.ts >= (SELECT ts FROM xpu_analysis_focus)
            AND l.ts < (SELECT end_ts FROM xpu_analysis_focus)
        ),
        ls AS MATERIALIZED (
          SELECT utid, ts, callsite_id FROM xpu_launch_stack WHERE ts IN (SELECT ts FROM a)
        )
        SELECT a.api_id, a.name, a.ns, ls.callsite_id
        FROM a LEFT JOIN ls ON ls.utid = a.utid AND ls.ts = a.ts
        """
    )
    return _sites(trace, rows, "api_id", "ns", "name", top)
