"""GPU busy islands in numpy: the union of the intervals in which a device (all its ops, or
one kind of work: compute kernels, NCCL kernels, copies, sets) or one stream runs ops.
Ops overlap across streams and on sibling lanes of one stream, so busy time is measured on
islands: ops sorted by start, an island opens at an op that starts after every earlier op
of its group ended (the running maximum of their ends) and ends at that running maximum
just before the next opening.

The engine's SQL did this with window functions, row by row in SQLite compiled to wasm.
The ops are read out once (`xpu_analysis_op`) and merged here; what SQL needs back is
written as small tables (the gap openings, the step and overlap sums) by the modules that
use them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collector.arrays import first_seen_codes, stable_argsort_by_rank
from exporters.analysis.session import session_of
from exporters.perfetto.engine.trace_processor import ArrayTable, Trace, table_sql

# Kinds of work, as the analysis names them; 'any' is every op of a device.
KINDS = ("any", "compute", "nccl", "memcpy", "memset")
ANY = 0
NO_DEVICE = -1  # an op whose stream track is under no device track

OPS_SQL = f"""
select id, coalesce(device_track_id, {NO_DEVICE}) as device, stream, ts, end_ts,
       api_ts is not null as launched, coalesce(api_ts, 0) as api_ts,
       case when category = 'memcpy' then {KINDS.index("memcpy")}
            when category = 'memset' then {KINDS.index("memset")}
            when name like 'nccl%' or name like 'void nccl%' then {KINDS.index("nccl")}
            else {KINDS.index("compute")} end as kind
from xpu_analysis_op
"""

_NONE = np.iinfo(np.int64).min  # prev_end of a group's first op: nothing ended before it


@dataclass(frozen=True)
class Reach:
    """Ops sorted by (group, ts, end_ts), each with the furthest end of its group's earlier
    ops (`prev_end`; _NONE for a group's first op) and of itself and those (`reach`)."""

    order: np.ndarray  # the sort, as indices into the ops given
    group: np.ndarray
    ts: np.ndarray
    prev_end: np.ndarray
    reach: np.ndarray
    opening: np.ndarray  # bool: the op opens an island


def time_order(ts: np.ndarray, end_ts: np.ndarray) -> np.ndarray:
    """The ops' order by (ts, end_ts), ties in input order: what running_reach sorts each
    grouping's ops within a group by (computed once for all of them)."""
    return np.lexsort((end_ts, ts))


def running_reach(
    group: np.ndarray, ts: np.ndarray, end_ts: np.ndarray, by_time: np.ndarray | None = None
) -> Reach:
    """`by_time`: time_order(ts, end_ts), where the caller has it."""
    if by_time is None:
        by_time = time_order(ts, end_ts)
    # Sorted by (group, ts, end_ts), ties in input order, as np.lexsort((end_ts, ts, group))
    # would: a stable sort by group of the ops in time order (the groups are few).
    order = by_time[stable_argsort_by_rank(group[by_time])]
    g, s, e = group[order], ts[order], end_ts[order]
    first = np.ones(g.size, dtype=bool)
    first[1:] = g[1:] != g[:-1]
    bounds = np.r_[np.flatnonzero(first), g.size]
    reach = np.empty_like(e)
    # A running maximum restarts at each group: one accumulate per group (a few per
    # device: kinds or streams), each over a contiguous slice.
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        np.maximum.accumulate(e[a:b], out=reach[a:b])
    prev_end = np.empty_like(e)
    prev_end[1:] = reach[:-1]
    prev_end[first] = _NONE
    opening = first | (s > prev_end)
    return Reach(order, g, s, prev_end, reach, opening)


@dataclass(frozen=True)
class Islands:
    group: np.ndarray
    ts: np.ndarray
    end_ts: np.ndarray


def islands(reach: Reach) -> Islands:
    """The islands of each group, sorted by (group, ts)."""
    k = np.flatnonzero(reach.opening)
    if k.size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return Islands(empty, empty, empty)
    g = reach.group[k]
    # An island ends at the reach just before the next opening of its group; the group's
    # last island at the group's furthest end (the reach of its last op).
    last_of_group = np.r_[np.flatnonzero(reach.group[1:] != reach.group[:-1]), reach.group.size - 1]
    group_end = reach.reach[last_of_group]
    end = group_end[np.searchsorted(reach.group[last_of_group], g)]
    same = g[1:] == g[:-1]
    end[:-1][same] = reach.prev_end[k[1:]][same]
    return Islands(g, reach.ts[k], end)


def clip(found: Islands, regions: list[tuple[int, int]]) -> Islands:
    """The parts of the islands inside the regions (disjoint), by region then island."""
    parts = []
    for start, end in regions:
        lo, hi = np.maximum(found.ts, start), np.minimum(found.end_ts, end)
        keep = (found.ts < end) & (found.end_ts > start)
        parts.append((found.group[keep], lo[keep], hi[keep]))
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Islands(empty, empty, empty)
    return Islands(*(np.concatenate(cols) for cols in zip(*parts, strict=True)))


def covered(found: Islands, group: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """For each query i: the time the islands of group[i] cover in [start[i], end[i]) (the
    islands of one group never overlap: those of a device and kind, clipped or not)."""
    out = np.zeros(group.size, dtype=np.int64)
    for g in np.unique(group).tolist():
        mine = found.group == g
        if not mine.any():
            continue
        order = np.argsort(found.ts[mine], kind="stable")
        ts, lengths = found.ts[mine][order], (found.end_ts[mine] - found.ts[mine])[order]
        before = np.cumsum(lengths) - lengths  # covered before each island starts

        def upto(
            x: np.ndarray,
            ts: np.ndarray = ts,
            lengths: np.ndarray = lengths,
            before: np.ndarray = before,
        ) -> np.ndarray:
            i = np.searchsorted(ts, x, side="right") - 1  # the last island starting <= x
            j = np.maximum(i, 0)
            return np.where(i >= 0, before[j] + np.clip(x - ts[j], 0, lengths[j]), 0)

        q = np.flatnonzero(group == g)
        out[q] = upto(end[q]) - upto(start[q])
    return out


@dataclass(frozen=True)
class GpuOps:
    """xpu_analysis_op's ops as arrays."""

    id: np.ndarray
    device: np.ndarray  # NO_DEVICE where none
    stream: np.ndarray  # index into stream_names
    stream_names: list[str]  # the stream tracks' names
    ts: np.ndarray
    end_ts: np.ndarray
    kind: np.ndarray  # index into KINDS
    launched: np.ndarray  # bool: an API call launched it (api_ts is its start)
    api_ts: np.ndarray
    by_time: np.ndarray  # time_order(ts, end_ts)


@dataclass(frozen=True)
class GpuBusy:
    ops: GpuOps
    any_reach: Reach  # per device
    all_islands: Islands  # group = device * len(KINDS) + kind, every island unclipped
    analysed: Islands  # the same inside the analysed regions (xpu_analysis_region)

    def device_islands(self, kind: int = ANY, analysed: bool = False) -> Islands:
        """One kind's islands, group = device."""
        found = self.analysed if analysed else self.all_islands
        mine = found.group % len(KINDS) == kind
        return Islands(found.group[mine] // len(KINDS), found.ts[mine], found.end_ts[mine])


def _read(trace: Trace) -> GpuOps:
    cols = trace.query_arrays(OPS_SQL)
    names: list[str]
    names, stream = first_seen_codes(cols["stream"])
    ts = np.asarray(cols["ts"], dtype=np.int64)
    end_ts = np.asarray(cols["end_ts"], dtype=np.int64)
    return GpuOps(
        id=np.asarray(cols["id"], dtype=np.int64),
        device=np.asarray(cols["device"], dtype=np.int64),
        stream=stream,
        stream_names=names,
        ts=ts,
        end_ts=end_ts,
        kind=np.asarray(cols["kind"], dtype=np.int64),
        launched=np.asarray(cols["launched"], dtype=np.int64) != 0,
        api_ts=np.asarray(cols["api_ts"], dtype=np.int64),
        by_time=time_order(ts, end_ts),
    )


def compute(ops: GpuOps, regions: list[tuple[int, int]]) -> GpuBusy:
    n = len(KINDS)
    any_reach = running_reach(ops.device, ops.ts, ops.end_ts, ops.by_time)
    by_kind = islands(running_reach(ops.device * n + ops.kind, ops.ts, ops.end_ts, ops.by_time))
    per_device = islands(any_reach)
    found = Islands(
        np.r_[per_device.group * n + ANY, by_kind.group],
        np.r_[per_device.ts, by_kind.ts],
        np.r_[per_device.end_ts, by_kind.end_ts],
    )
    return GpuBusy(ops, any_reach, found, clip(found, regions))


def track_names(trace: Trace, ids: list[int]) -> dict[int, str | None]:
    """The name of each of these tracks that exists (None where it has no name)."""
    known = ", ".join(str(int(i)) for i in sorted(set(ids))) or "NULL"
    rows = trace.query(f"select id, name from track where id in ({known})")
    return {r["id"]: r["name"] for r in rows}


def gpu_busy(trace: Trace) -> GpuBusy:
    """The busy islands of the trace's analysed ops (span.sql loaded), computed once per
    trace and kept in its analysis session."""
    session = session_of(trace)
    if session.gpu_busy is None:
        regions = [
            (int(r["ts"]), int(r["end_ts"]))
            for r in trace.query("select ts, end_ts from xpu_analysis_region order by ts")
        ]
        session.gpu_busy = compute(_read(trace), regions)
    return session.gpu_busy


def _device(value: int) -> int | None:
    return None if value == NO_DEVICE else value


def create_openings(trace: Trace) -> None:
    """`_xpu_op_opening` for gaps.sql: each op that starts after every earlier op of its
    device ended (not the device's first), with that furthest end: a gap lies between."""
    busy = gpu_busy(trace)
    reach = busy.any_reach
    k = np.flatnonzero(reach.opening & (reach.prev_end != _NONE))
    columns = {
        "id": busy.ops.id[reach.order[k]],
        "device_track_id": reach.group[k],
        "ts": reach.ts[k],
        "prev_end": reach.prev_end[k],
    }
    trace.create_table(ArrayTable("_xpu_op_opening", columns, {"device_track_id": NO_DEVICE}))


def create_island_table(trace: Trace) -> None:
    """`xpu_analysis_busy_island` (device_track_id, kind, ts, end_ts): the islands inside
    the analysed regions, for `query` (the analyses use the arrays)."""
    found = gpu_busy(trace).analysed
    n = len(KINDS)
    rows = list(
        zip(
            map(_device, (found.group // n).tolist()),
            [KINDS[k] for k in (found.group % n).tolist()],
            found.ts.tolist(),
            found.end_ts.tolist(),
            strict=True,
        )
    )
    columns = ("device_track_id", "kind", "ts", "end_ts")
    trace.execute(table_sql("xpu_analysis_busy_island", columns, rows))
