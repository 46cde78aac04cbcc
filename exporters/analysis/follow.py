"""Following a wait to what it waited for (issue 37, item 2), where the trace can tell:
- the launching thread waiting for a DataLoader batch (gaps.sql's data waits) -> what the
  DataLoader worker processes ran meanwhile (their timer samples: the dataset's
  __getitem__, collate, transforms) and how busy they were;
- blocked in another call (a queue, a lock) -> what the other threads of its process ran
  meanwhile (the thread that was to hand it something);
- a sync or blocking copy -> the GPU op it waited for (the op whose end emptied the queue).

The waits' time is shared among the lines the others ran in proportion to their samples
inside the waits, so the sites add up to the time waited."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from exporters.analysis import locations
from exporters.analysis.idle import Site
from exporters.analysis.session import session_of
from exporters.analysis.tables import sample_period_ns
from exporters.perfetto.engine.trace_processor import Trace

if TYPE_CHECKING:
    import numpy as np

# Workers busy at least this share of the waits (of each worker's time) are saturated:
# only then do more workers help (where there are cores for them).
SATURATED = 0.8
# The ops a sync waited for are named from this many of them (the most common names).
SYNC_TARGET_OPS = 1000


@dataclass(frozen=True)
class Activity:
    """What others ran while the launching thread waited."""

    who: str  # the threads or processes followed ('DataLoader workers', a thread's name)
    count: int  # how many of them ran in the waits
    waited_ns: int  # the waits' time followed
    busy: float  # their samples' time / (waited_ns x count)
    sites: list[Site]  # where they ran (the waited time shared by their samples)
    cores: int | None  # the machine's CPUs where the trace says

    def saturated(self) -> bool:
        return self.busy >= SATURATED


def _intervals(trace: Trace, data: bool) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """The focus gaps' waits of one kind (clipped to the gaps' host parts), merged, and the
    processes that waited."""
    import numpy as np

    cols = trace.query_arrays(
        "select w.from_ts, w.to_ts, t.upid from _xpu_gap_wait w "
        "join xpu_focus_gap g on g.id = w.gap_id join thread t on t.utid = w.utid "
        f"where w.is_data = {1 if data else 0} and w.covered_ns > 0 order by w.from_ts"
    )
    if not len(cols.get("from_ts", [])):
        return np.zeros(0, np.int64), np.zeros(0, np.int64), []
    start = np.asarray(cols["from_ts"], np.int64)
    end = np.asarray(cols["to_ts"], np.int64)
    # Waits of several threads may overlap: merged, each moment counts once.
    reach = np.maximum.accumulate(end)
    opens = np.r_[True, start[1:] > reach[:-1]]
    idx = np.flatnonzero(opens)
    merged_end = np.r_[reach[idx[1:] - 1], reach[-1]]
    return start[idx], merged_end, sorted({int(u) for u in cols["upid"].tolist()})


def _inside(ts: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    import numpy as np

    k = np.searchsorted(start, ts, side="right") - 1
    ok = k >= 0
    ok[ok] = ts[ok] <= end[k[ok]]
    return ok


def _activity(
    trace: Trace, who: str, threads_sql: str, start: np.ndarray, end: np.ndarray
) -> Activity | None:
    import numpy as np

    waited = int((end - start).sum())
    if not waited:
        return None
    cols = trace.query_arrays(
        "select s.ts, s.utid, s.callsite_id from xpu_cpu_sample s "
        f"where s.utid in ({threads_sql}) and s.ts >= {int(start[0])} "
        f"and s.ts <= {int(end[-1])}"
    )
    if not len(cols.get("ts", [])):
        return None
    ts = np.asarray(cols["ts"], np.int64)
    keep = _inside(ts, start, end)
    if not keep.any():
        return None
    utid = np.asarray(cols["utid"], np.int64)[keep]
    callsite = np.asarray(cols["callsite_id"], np.int64)[keep]
    ids, counts = np.unique(callsite, return_counts=True)
    frames = locations.callsite_frames(trace, ids.tolist())
    per_line: dict[str, int] = {}
    for cid, n in zip(ids.tolist(), counts.tolist(), strict=True):
        loc = locations.location(frames.get(int(cid), [])) or "[unknown]"
        per_line[loc] = per_line.get(loc, 0) + int(n)
    total = int(counts.sum())
    running = len(set(utid.tolist()))
    sites = [
        Site(loc, waited * n // total, n)
        for loc, n in sorted(per_line.items(), key=lambda kv: -kv[1])
    ]
    period = sample_period_ns(trace)
    busy = total * period / (waited * running) if period else 0.0
    return Activity(who, running, waited, min(1.0, busy), sites, _cores(trace))


def _cores(trace: Trace) -> int | None:
    """The machine's CPUs: the recorded count where the trace has one, else the CPUs its
    samples were seen on (a lower bound), else unknown."""
    recorded = trace.scalar(
        "select coalesce(max(int_value), 0) from xpu_metadata where key = 'cpu_count'"
    )
    if recorded:
        return int(recorded)
    seen = trace.scalar("select count(distinct cpu) from xpu_cpu_sample where cpu is not null")
    return int(seen) if seen else None


def loader_workers(trace: Trace) -> Activity | None:
    """What the DataLoader worker processes ran while the launching thread waited for a
    batch (its data waits in the findings' gaps); once per opened trace."""
    followed = session_of(trace).followed
    if "loader_workers" not in followed:
        followed["loader_workers"] = _loader_workers(trace)
    return followed["loader_workers"]


def _loader_workers(trace: Trace) -> Activity | None:
    start, end, upids = _intervals(trace, data=True)
    if not len(start):
        return None
    known = ",".join(map(str, upids)) or "NULL"
    workers = (
        "select t.utid from thread t join _xpu_loader_worker w on w.upid = t.upid "
        f"where w.parent_upid is null or w.parent_upid in ({known})"
    )
    return _activity(trace, "DataLoader workers", workers, start, end)


def other_threads(trace: Trace) -> Activity | None:
    """What the other threads of the waiting process ran while the launching thread was
    blocked (its non-data waits in the findings' gaps), named after the busiest."""
    start, end, upids = _intervals(trace, data=False)
    if not len(start):
        return None
    known = ",".join(map(str, upids)) or "NULL"
    waiting = "select distinct w.utid from _xpu_gap_wait w join xpu_focus_gap g on g.id = w.gap_id"
    others = f"select utid from thread where upid in ({known}) and utid not in ({waiting})"
    found = _activity(trace, "other threads", others, start, end)
    if found is None:
        return None
    busiest = trace.query(
        f"select t.name, count(*) as n from xpu_cpu_sample s join thread t using (utid) "
        f"where s.utid in ({others}) and s.ts >= {int(start[0])} and s.ts <= {int(end[-1])} "
        "group by s.utid order by n desc limit 1"
    )
    name = str(busiest[0]["name"] or "a thread") if busiest else "a thread"
    return Activity(
        f"thread '{name}'", found.count, found.waited_ns, found.busy, found.sites, found.cores
    )


def sync_targets(trace: Trace, top: int = 2) -> list[tuple[str, int]]:
    """The GPU ops that the syncs in the findings' gaps waited for (the op whose end began
    the gap, on its device): (name, gaps), most often first."""
    import numpy as np

    from exporters.analysis.busy import gpu_busy

    rows = trace.query_arrays(
        "select ts, device_track_id from xpu_focus_gap where block_id is not null"
    )
    if not len(rows.get("ts", [])):
        return []
    ops = gpu_busy(trace).ops
    gap_ts = np.asarray(rows["ts"], np.int64)
    hit = np.flatnonzero(np.isin(ops.end_ts, gap_ts))
    if not len(hit):
        return []
    wanted = set(
        zip(np.asarray(rows["device_track_id"], np.int64).tolist(), gap_ts.tolist(), strict=True)
    )
    ids = [
        int(ops.id[i]) for i in hit.tolist() if (int(ops.device[i]), int(ops.end_ts[i])) in wanted
    ]
    if not ids:
        return []
    # A join by id, over at most SYNC_TARGET_OPS of them (`id IN (...)` is a scan per value).
    values = ",".join(f"({i})" for i in ids[:SYNC_TARGET_OPS])
    counted = trace.query(
        f"with o(id) as (values {values}) select s.name, count(*) as n from o "
        f"join slice s using (id) group by s.name order by n desc limit {int(top)}"
    )
    return [(str(r["name"]), int(r["n"])) for r in counted]
