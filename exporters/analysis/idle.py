"""GPU idle gaps: how much of the span each cause explains, and where in the code.

Reads the tables of gaps.sql; the classes and how a gap is split among them are documented
there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporters.analysis import causes, locations
from exporters.perfetto.engine.trace_processor import Trace

CLASSES = causes.KEYS


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


_COLUMNS = causes.COLUMNS


# The gaps the sites are of: the findings' (from the second step on); a rank's own are a
# subquery of the same rows (rank_causes.py).
FOCUS = "xpu_focus_gap"


def sync_sites(
    trace: Trace, top: int = 3, gaps: str = FOCUS, weight: str = "g.sync_ns"
) -> list[Site]:
    """The blocking calls the GPU ran dry behind, by the line that made them, weighted by
    `weight` (the time in the call; HOST_SYNC: with the work after it)."""
    return call_sites(
        trace,
        f"SELECT g.block_id AS call_id, s.ts, g.utid, {weight} AS ns, g.block_name AS detail "
        f"FROM {gaps} g JOIN slice s ON s.id = g.block_id WHERE {weight} > 0",
        top,
    )


def launch_sites(trace: Trace, top: int = 3, gaps: str = FOCUS) -> list[Site]:
    """The launches the GPU waited for, by the model code that made them (the innermost
    Python frame outside the framework: a module's forward), weighted by the launch time
    that the samples of the launching code (sample_sites 'launch') do not already hold."""
    return call_sites(
        trace,
        "SELECT g.api_id AS call_id, g.api_ts AS ts, g.utid, "
        "g.launch_ns - min(g.launch_host_ns, coalesce((SELECT sum(s.covered_ns) "
        "FROM _xpu_gap_sample s WHERE s.gap_id = g.id AND s.kind = 'launch'), 0)) AS ns, "
        f"g.next_op AS detail FROM {gaps} g WHERE g.api_id IS NOT NULL AND g.launch_ns > 0",
        top,
        locate=locations.model_location,
    )


def nextcall_sites(
    trace: Trace, part: str, top: int = 3, where: str = "1", gaps: str = FOCUS
) -> list[Site]:
    """The launches that ended gaps with time in `part` (a column of xpu_gpu_gap), by the
    line that made them, weighted by that time."""
    return call_sites(
        trace,
        f"SELECT g.api_id AS call_id, g.api_ts AS ts, g.utid, g.{part} AS ns, "
        f"g.next_op AS detail FROM {gaps} g WHERE g.api_id IS NOT NULL AND g.{part} > 0 "
        f"AND ({where})",
        top,
    )


# Host time before the next op began that no CPU slice encloses (a converted trace's
# top-level Python between ops).
BETWEEN_OPS = "between CPU ops (no enclosing CPU slice)"


def enclosing_sites(
    trace: Trace, part: str, top: int = 3, where: str = "1", gaps: str = FOCUS
) -> list[Site]:
    """Without samples or launch stacks (converted traces): the gaps' `part` by the CPU
    slices around the next launch that began before the op making it (gaps.sql split that
    op's own time off as launching), named as slice_locations names them."""
    totals = {
        int(r["gap"]): int(r["ns"])
        for r in trace.query(
            f"SELECT g.id AS gap, g.{part} AS ns FROM {gaps} g "
            f"WHERE g.api_id IS NOT NULL AND g.{part} > 0 AND ({where})"
        )
    }
    names: dict[int, list[str]] = {gap: [] for gap in totals}
    for r in trace.query(
        f"SELECT g.id AS gap, a.name FROM {gaps} g JOIN ancestor_slice(g.api_id) a "
        f"WHERE g.api_id IS NOT NULL AND g.{part} > 0 AND ({where}) "
        # (Not the op that launches next: its own time before the launch is launching.)
        "AND a.ts < g.api_ts - g.launch_host_ns ORDER BY g.id, a.depth DESC"
    ):
        names[int(r["gap"])].append(str(r["name"]))
    weights: dict[str, list[int]] = {}
    for gap, ns in totals.items():
        loc = locations.enclosing_location(names[gap]) or BETWEEN_OPS
        w = weights.setdefault(loc, [0, 0])
        w[0] += ns
        w[1] += 1
    return _top(weights, top)


def op_sites(trace: Trace, where: str, top: int = 3) -> list[Site]:
    """The launch sites of the GPU ops (xpu_launch rows) matching `where`, by GPU time."""
    return call_sites(
        trace,
        "SELECT l.api_id AS call_id, l.api_ts AS ts, l.utid, l.dur AS ns, l.name AS detail "
        f"FROM xpu_launch l WHERE ({where}) AND l.ts >= (SELECT ts FROM xpu_analysis_focus) "
        "AND l.ts < (SELECT end_ts FROM xpu_analysis_focus)",
        top,
    )


_KIND_PART = {"data": "data_ns", "host": "host_ns", "launch": "launch_host_ns"}


def sample_sites(
    trace: Trace, kind: str, after_sync: bool | None = None, top: int = 3, gaps: str = FOCUS
) -> list[Site]:
    """Where the launching thread's samples in the gaps ran, of one kind (gaps.sql: 'data'
    input-pipeline code, 'launch' the code launching the model's GPU work, 'host' other
    code), in the gaps that began in a sync (`after_sync`), the others, or all; by the line
    users wrote ('launch': by the model code, a module's forward)."""
    part = _KIND_PART[kind]
    where = f"g.{part} > 0 AND s.kind = '{kind}'"
    if after_sync is not None:
        where += f" AND g.block_id IS {'NOT ' if after_sync else ''}NULL"
    rows = trace.query(
        f"""
        SELECT s.callsite_id, sum(s.covered_ns) AS ns, count(*) AS n
        FROM _xpu_gap_sample s JOIN {gaps} g ON g.id = s.gap_id
        WHERE {where}
        GROUP BY s.callsite_id
        """
    )
    if not rows:
        if kind == "launch" or trace.scalar("select count(*) from _xpu_gap_sample"):
            return []
        # No samples in the gaps (converted traces, --no-cpu): the code that made the next
        # launch, from its launch stack or the CPU slices around it.
        sync = "1" if after_sync is None else f"g.block_id IS {'NOT ' if after_sync else ''}NULL"
        if kind == "host" and not trace.scalar("select count(*) from xpu_launch_stack"):
            return enclosing_sites(trace, part, top, sync, gaps)
        return nextcall_sites(trace, part, top, sync, gaps)
    locate = locations.model_location if kind == "launch" else locations.location
    frames = locations.callsite_frames(trace, (r["callsite_id"] for r in rows))
    # Samples land on whatever line of a function runs: they are added up per function
    # (the dataset's __getitem__, the function between launches), named by its heaviest line.
    per_function: dict[str, dict[str, list[int]]] = {}
    for r in rows:
        loc = locate(frames.get(int(r["callsite_id"]), []))
        lines = per_function.setdefault(locations.function_of(loc), {})
        w = lines.setdefault(loc, [0, 0])
        w[0] += int(r["ns"])
        w[1] += int(r["n"])
    weights = {
        max(lines.items(), key=lambda kv: kv[1][0])[0]: [
            sum(w[0] for w in lines.values()),
            sum(w[1] for w in lines.values()),
        ]
        for lines in per_function.values()
    }
    return _top(weights, top)


# CPython takes the GIL back (after a C call released it) in these, waiting on a condition
# variable: a blocked call under one of them is the GIL, held by another thread.
GIL_FRAMES = frozenset(
    {"take_gil", "PyEval_RestoreThread", "PyEval_AcquireThread", "PyEval_AcquireLock"}
)


def wait_sites(trace: Trace, data: bool, top: int = 3, gaps: str = FOCUS) -> list[Site]:
    """Where the launching thread waited in the gaps (xpu_wait, gaps.sql's _xpu_gap_wait):
    for the input pipeline (`data`) or anything else, by the line of the wait's stack, the
    call as detail."""
    part = "data_ns" if data else "wait_ns"
    rows = trace.query(
        f"""
        SELECT w.callsite_id, w.call, sum(w.covered_ns) AS ns, count(*) AS n
        FROM _xpu_gap_wait w JOIN {gaps} g ON g.id = w.gap_id
        WHERE g.{part} > 0 AND w.is_data = {1 if data else 0}
        GROUP BY w.callsite_id, w.call
        """
    )
    frames = locations.callsite_frames(trace, (r["callsite_id"] for r in rows))
    weights: dict[str, list[int]] = {}
    details: dict[str, dict[str, int]] = {}
    for r in rows:
        cid = r["callsite_id"]
        loc = locations.location(frames.get(int(cid), [])) if cid is not None else ""
        loc = loc or f"[{r['call']}]"
        w = weights.setdefault(loc, [0, 0])
        w[0] += int(r["ns"])
        w[1] += int(r["n"])
        call = str(r["call"])
        if cid is not None and any(name in GIL_FRAMES for name, _ in frames.get(int(cid), [])):
            call = f"the GIL (held by another thread; {call})"
        d = details.setdefault(loc, {})
        d[call] = d.get(call, 0) + int(r["ns"])
    return [
        Site(s.location, s.ns, s.count, max(details[s.location].items(), key=lambda kv: kv[1])[0])
        for s in _top(weights, top)
    ]


# Calls without a launch stack (converted traces) are located one by one through their
# enclosing slices: only the heaviest.
_UNSTACKED_CALLS = 200


def call_sites(
    trace: Trace,
    calls_sql: str,
    top: int,
    locate: Callable[[list[locations.Frame]], str] = locations.location,
) -> list[Site]:
    """Sites of API calls (`calls_sql`: call_id, ts, utid, ns, detail), by the innermost user
    frame of each call's launch stack (summed per stack in SQL), or of its enclosing slices.
    `ns` is the weight the sites are ranked by (time; bytes for allocations).  Needs
    launches.load_stack_lookup."""
    # One pass over the calls: those with a launch stack summed per stack, the heaviest of
    # the others one by one.
    rows = trace.query(
        f"""
        WITH a AS MATERIALIZED (
          SELECT c.call_id, c.detail, c.ns, ls.callsite_id
          FROM ({calls_sql}) c
          LEFT JOIN _xpu_launch_stack_at ls ON ls.ts = c.ts AND ls.utid = c.utid
        )
        SELECT callsite_id, NULL AS call_id, detail, sum(ns) AS ns, count(*) AS n
        FROM a WHERE callsite_id IS NOT NULL GROUP BY callsite_id, detail
        UNION ALL
        SELECT * FROM (
          SELECT NULL, call_id, detail, ns, 1 FROM a WHERE callsite_id IS NULL
          ORDER BY ns DESC LIMIT {_UNSTACKED_CALLS})
        """
    )
    stacked = [r for r in rows if r["callsite_id"] is not None]
    unstacked = [r for r in rows if r["callsite_id"] is None]
    frames = locations.callsite_frames(trace, (r["callsite_id"] for r in stacked))
    by_slice = locations.slice_locations(trace, (int(r["call_id"]) for r in unstacked))
    weights: dict[str, list[int]] = {}
    details: dict[str, dict[str, int]] = {}

    def add(loc: str, detail: str, ns: int, n: int) -> None:
        if not loc:
            return
        w = weights.setdefault(loc, [0, 0])
        w[0] += ns
        w[1] += n
        d = details.setdefault(loc, {})
        d[detail] = d.get(detail, 0) + ns

    for r in stacked:
        loc = locate(frames.get(int(r["callsite_id"]), []))
        add(loc, str(r["detail"]), int(r["ns"]), int(r["n"]))
    for r in unstacked:
        add(by_slice.get(int(r["call_id"]), ""), str(r["detail"]), int(r["ns"]), 1)
    return [
        Site(s.location, s.ns, s.count, max(details[s.location].items(), key=lambda kv: kv[1])[0])
        for s in _top(weights, top)
    ]


def _top(weights: dict[str, list[int]], top: int) -> list[Site]:
    ranked = sorted(weights.items(), key=lambda kv: -kv[1][0])[:top]
    return [Site(loc, ns, n) for loc, (ns, n) in ranked if loc]
