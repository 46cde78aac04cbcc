"""`report --annotate OUT`: a copy of the trace with the analysis on the timeline, a track of
steps per process and a track per device of the classified GPU idle gaps, so the Perfetto UI
shows them beside the GPU streams (`view` pins them at the top: exporters/report/ui_opening.py).
A gap is named in words with where its cause ran ("data loading: Dataset.__getitem__
(data.py:41)"), so the UI's search finds it by either; arg `cause` keeps the class's key.
The command writes the copy by the merge of the one input (the encoder's packet pass-through,
in the trace's BOOTTIME domain, which is trace_processor's timeline) with `add_marks`."""

from __future__ import annotations

from dataclasses import dataclass

from exporters.analysis import causes, follow, locations
from exporters.perfetto.engine.trace_processor import Trace

STEP_LANE = "steps: "  # + the process's name
GAP_LANE = "GPU idle: "  # + the device's track name
CATEGORY = "xpu_perf_analysis"
# Where a gap's cause ran, for the classes samples explain: the gap's samples of that
# kind (_xpu_gap_sample.kind).
_SAMPLED = {"data_loading": "data", "host_compute": "host", "launch": "launch"}


# Each step on its process's lane.  The lane is named by the process's name, with its pid
# where several processes of the steps share that name (two `python3` ranks, two workers of
# one program): one lane per name would nest their steps wrongly.  A detected step (named
# `step N` by steps.sql, numbered over all processes) is numbered within its process, as
# the report says the steps ('steps 2-30 of 2 processes').
_STEPS_SQL = """
WITH named AS (
  SELECT s.ts, s.dur, s.name, s.step, s.source, s.upid,
         coalesce(p.name, 'pid ' || p.pid, 'process ' || s.upid) AS pname, p.pid,
         row_number() OVER (PARTITION BY s.upid ORDER BY s.ts) AS k
  FROM xpu_step s LEFT JOIN process p USING (upid)
),
shared AS (
  SELECT pname FROM (SELECT DISTINCT upid, pname FROM named)
  GROUP BY pname HAVING count(*) > 1
)
SELECT ts, dur, source,
       CASE WHEN name = 'step ' || step THEN 'step ' || k ELSE name END AS name,
       pname || CASE WHEN pname IN (SELECT pname FROM shared)
                     THEN ' pid ' || coalesce(pid, upid) ELSE '' END AS process
FROM named ORDER BY ts
"""


@dataclass(frozen=True)
class Mark:
    lane: str
    ts: int
    dur: int
    name: str
    args: dict[str, int | str]


def annotation_marks(trace: Trace, between: tuple[int, int] | None = None) -> list[Mark]:
    """The steps and gaps of an analysed trace (analysis tables loaded) as marks; where
    `between` [lo, hi) is given (the span the findings cover), only the steps overlapping it
    and the gaps starting in it (those the findings count, as xpu_focus_gap)."""

    def inside(ts: int, end: int | None = None) -> bool:
        if between is None:
            return True
        return ts < between[1] and (end > between[0] if end is not None else ts >= between[0])

    marks = [
        Mark(
            STEP_LANE + str(r["process"]),
            int(r["ts"]),
            int(r["dur"]),
            str(r["name"]),
            {"source": str(r["source"])},
        )
        for r in trace.query(_STEPS_SQL)
        if inside(int(r["ts"]), int(r["ts"]) + int(r["dur"]))
    ]
    where = gap_locations(trace)
    parts = tuple(causes.COLUMNS.values())
    for r in trace.query(
        "select id, ts, dur, device, class, coalesce(next_op, '') as next_op, "
        "coalesce(api_name, '') as api, coalesce(block_name, '') as block, "
        + ", ".join(parts)
        + " from xpu_gpu_gap order by ts"
    ):
        if not inside(int(r["ts"])):
            continue
        # The gap named by its cause (causes.py's key), with every part's ns.
        args: dict[str, int | str] = {k: int(r[k]) for k in parts}
        args["next_op"] = str(r["next_op"])
        args["cause"] = str(r["class"])
        if r["block"]:
            args["waited_in"] = str(r["block"])
        cause = causes.BY_KEY.get(str(r["class"]))
        name = cause.annotate if cause is not None else str(r["class"])
        location = where.get(int(r["id"]))
        if location:
            name = f"{name}: {location}"
            args["location"] = location
        marks.append(Mark(GAP_LANE + str(r["device"]), int(r["ts"]), int(r["dur"]), name, args))
    return marks


def gap_locations(trace: Trace) -> dict[int, str]:
    """Each gap's cause's place in the code (gap id -> 'func (file.py:line)'), as the
    findings name places (locations.py): the heaviest stack among the gap's samples of its
    class, else the launch stack of the call that blocked (sync) or of the next launch
    (the enclosing slices where calls have no stack, as in converted traces).  Gaps with
    nothing to tell are left out."""
    found: dict[int, str] = {}
    weights: dict[int, tuple[int, int]] = {}  # gap -> (ns, callsite), the heaviest so far
    for cls, kind in _SAMPLED.items():
        for r in trace.query(
            "select s.gap_id, s.callsite_id, sum(s.covered_ns) as ns "
            "from _xpu_gap_sample s join xpu_gpu_gap g on g.id = s.gap_id "
            f"where g.class = '{cls}' and s.kind = '{kind}' and s.callsite_id is not null "
            "group by s.gap_id, s.callsite_id"
        ):
            gap, ns = int(r["gap_id"]), int(r["ns"])
            if ns > weights.get(gap, (-1, 0))[0]:
                weights[gap] = (ns, int(r["callsite_id"]))
    # A gap the thread spent blocked: where it waited (the heaviest wait's stack).
    waited: dict[int, tuple[int, int]] = {}
    for r in trace.query(
        "select w.gap_id, w.callsite_id, sum(w.covered_ns) as ns "
        "from _xpu_gap_wait w join xpu_gpu_gap g on g.id = w.gap_id "
        "where g.class in ('wait', 'data_loading') and w.callsite_id is not null "
        "group by w.gap_id, w.callsite_id"
    ):
        gap, ns = int(r["gap_id"]), int(r["ns"])
        if ns > waited.get(gap, (-1, 0))[0]:
            waited[gap] = (ns, int(r["callsite_id"]))
    weights = waited | weights  # samples of its class first, else where it waited
    # A wait for a batch with no sample of its own: where the finding names it, the busiest
    # line of the DataLoader workers it waited for (the next launch's line is no cause).
    workers = follow.loader_workers(trace)
    worker_site = workers.sites[0].location if workers and workers.sites else ""
    sampled = {gap for gap in weights if gap not in waited}
    calls: dict[int, int] = {}  # gap -> the API call's slice id
    stacked: dict[int, int] = {}  # gap -> the call's launch stack
    for r in trace.query(
        "select g.id, c.id as call_id, ls.callsite_id from xpu_gpu_gap g "
        "join slice c on c.id = coalesce(case when g.class = 'sync' then g.block_id end, g.api_id) "
        "left join thread_track tt on tt.id = c.track_id "
        "left join _xpu_launch_stack_at ls on ls.ts = c.ts and ls.utid = tt.utid"
    ):
        if int(r["id"]) in weights:
            continue
        if r["callsite_id"] is not None:
            stacked[int(r["id"])] = int(r["callsite_id"])
        else:
            calls[int(r["id"])] = int(r["call_id"])
    callsites = {gap: cs for gap, (_, cs) in weights.items()} | stacked
    frames = locations.callsite_frames(trace, callsites.values())
    for gap, callsite in callsites.items():
        loc = locations.location(frames.get(callsite, []))
        if loc:
            found[gap] = loc
    by_slice = locations.slice_locations(trace, calls.values())
    for gap, call in calls.items():
        if by_slice.get(call):
            found[gap] = by_slice[call]
    if worker_site:
        for r in trace.query("select id from xpu_gpu_gap where class = 'data_loading'"):
            if int(r["id"]) not in sampled:
                found[int(r["id"])] = worker_site
    return found


def add_marks(writer: object, marks: list[Mark]) -> None:
    """Write the marks as tool slices; the command passes this to the merge that copies the
    trace (readers never import the merge: the command layer wires the two)."""
    for m in marks:
        writer.add_tool_slice(m.lane, m.ts, m.dur, m.name, CATEGORY, m.args)  # type: ignore[attr-defined]
