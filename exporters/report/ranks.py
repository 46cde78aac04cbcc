"""`report --ranks`: the per-rank table (ranks.sql) of one trace or of many, and which rank
is the slowest.

One SQL script (gpu_busy.sql then ranks.sql, its last statement the table) answers on an
opened trace and, unchanged, through the batch query (collector/batch_query.py: a process
pool or a Dask cluster) on many: per-node traces that were not merged give one table whose
first column names the trace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collector.visible_text import printable
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace
from exporters.perfetto.engine.views import VIEWS, load_views
from exporters.report.cells import distinct_tails
from exporters.report.queries import Column, Section

DEFAULT_STEPS = "ProfilerStep#*"
RANKS = "report.ranks"
_TABLE = "SELECT * FROM xpu_rank"

COLUMNS = (
    Column("rank", "rank", "id"),
    Column("host", "host"),
    Column("pid", "pid", "id", optional=6),
    Column("process", "process", "name"),
    Column("gpu_busy_ns", "GPU busy", "ns", optional=2),
    Column("gpu_busy_pct", "busy %", "pct"),
    Column("compute_ns", "compute", "ns"),
    Column("comm_ns", "NCCL", "ns"),
    Column("comm_kernels", "NCCL ops", "count", optional=5),
    Column("exposed_comm_ns", "NCCL exposed", "ns"),
    Column("exposed_pct", "exposed %", "pct", optional=1),
    Column("steps", "steps", "count", optional=3),
    Column("step_mean_ns", "step mean", "ns"),
    Column("step_max_ns", "step max", "ns", optional=4),
    Column("late_ns", "collective lag", "ns", optional=7),
)
TRACE_COLUMN = Column("trace", "trace", "name")


def ranks_sql(steps: str = DEFAULT_STEPS) -> str:
    """The script for a trace whose views are loaded (the batch query): the busy-window
    tables, the per-rank ones, then the table."""
    return sql_modules.script(RANKS, skip=(VIEWS,), span_all=False, steps=steps) + ("\n" + _TABLE)


def rank_rows(
    trace: Trace, steps: str = DEFAULT_STEPS, window: int | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The per-rank table of one opened trace (its views loaded for `window`)."""
    load_views(trace, window)
    sql_modules.load(trace, RANKS, span_all=False, steps=steps)
    return trace.query_columns(_TABLE)


def _who_where(row: Mapping[str, object], trace_names: Mapping[str, str] | None) -> tuple[str, str]:
    """A rank's row as a verdict names it: 'rank N' (else its pid), and where it ran (its
    trace as the table names it, its host, its pid)."""
    who = f"rank {row['rank']}" if row.get("rank") is not None else f"pid {row.get('pid')}"
    trace = row.get("trace")
    if trace is not None and trace_names:
        trace = trace_names.get(str(trace), trace)
    where = ", ".join(str(v) for v in (trace, row.get("host"), f"pid {row.get('pid')}") if v)
    return who, where


@dataclass(frozen=True)
class Slowest:
    row: dict[str, Any]
    criterion: str  # "mean step time" or "compute time" (no steps marked)
    value_ns: int
    fastest_ns: int  # the same measure of the fastest rank
    ranks: int = 2  # how many were compared

    def describe(self, trace_names: Mapping[str, str] | None = None) -> str:
        """One line; `trace_names`: the names the table gave the traces (trace_labels)."""
        row = self.row
        who, where = _who_where(row, trace_names)
        extra = (
            f", {100.0 * (self.value_ns - self.fastest_ns) / self.fastest_ns:.1f}% above the "
            "fastest rank"
            if self.fastest_ns > 0 and self.ranks > 1
            else ""
        )
        line = f"slowest: {who} ({where}): {self.criterion} {self.value_ns / 1e3:.1f} us{extra}"
        return printable(line)  # the host and the path come from the traces


# The column ranks.sql gives each rank's collectives in (their in-kernel ns, in order); read
# by arrival_across_traces, never shown.
COLLECTIVES_COLUMN = "collective_ns"


def arrival_across_traces(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """The collective arrival of ranks recorded in separate traces, whose clocks differ.

    Every rank of a communicator ends a collective at nearly the same moment (the last
    to arrive releases the others), so a rank's in-kernel time for it is how long it
    waited plus the transfer: a rank that started d later spent d less in the kernel.
    Compared per collective (the k-th NCCL kernel of each rank, k up to the fewest any
    rank has), `late_ns` = the longest in-kernel time minus the rank's own, averaged, is
    the same lag as ranks.sql's start minus the first rank's start, with no clock offset
    to estimate (nor the drift between two machines' clocks over the capture).  The rows
    get `late_ns`, `arrived_last` and `collectives` from it; rows without NCCL kernels
    are left as they are."""
    durs = {
        i: [int(v) for v in str(r[COLLECTIVES_COLUMN]).split(",")]
        for i, r in enumerate(rows)
        if r.get(COLLECTIVES_COLUMN)
    }
    if len(durs) < 2:
        return rows
    common = min(len(d) for d in durs.values())
    late = dict.fromkeys(durs, 0)
    last = dict.fromkeys(durs, 0)
    for k in range(common):
        at_k = {i: d[k] for i, d in durs.items()}
        longest, shortest = max(at_k.values()), min(at_k.values())
        for i, dur in at_k.items():
            late[i] += longest - dur
            if dur == shortest and shortest < longest:
                last[i] += 1
    out = []
    for i, r in enumerate(rows):
        if i in durs and common:
            r = {**r, "late_ns": late[i] // common, "arrived_last": last[i], "collectives": common}
        out.append(r)
    return out


# A rank whose collectives start at least this much after the first rank's, on average,
# is the one the others wait for.
STRAGGLER_NS = 20_000


@dataclass(frozen=True)
class Straggler:
    """The rank whose collectives start last: the others' NCCL time is spent waiting."""

    row: dict[str, Any]
    others_comm_ns: int  # the NCCL time of the other ranks, per rank on average
    cause: str = ""  # its own top cause and line (rank_causes.py), where known

    def describe(self, trace_names: Mapping[str, str] | None = None) -> str:
        """One line; `trace_names`: the names the table gave the traces (trace_labels)."""
        row = self.row
        who, where = _who_where(row, trace_names)
        text = (
            f"straggler: {who} ({where}): its collectives start {row['late_ns'] / 1e3:.1f} us "
            f"after the first rank's on average (last in {row['arrived_last']} of "
            f"{row['collectives']}); the other ranks wait for it in NCCL "
            f"({self.others_comm_ns / 1e6:.1f} ms of NCCL each against its "
            f"{int(row['comm_ns']) / 1e6:.1f} ms)"
        )
        # The host, the path and the cause's line come from the traces.
        return printable(f"{text}; {self.cause}" if self.cause else text)


def verdict(rows: list[dict[str, Any]]) -> Straggler | Slowest | None:
    """The rank the others wait for: by collective arrival where the ranks' collectives can
    be matched (one trace of them all) and one starts late; else the slowest by step time
    or compute (slowest()); None where there is no other rank to compare with."""
    timed = [r for r in rows if r.get("late_ns") is not None]
    if len(timed) >= 2:
        worst = max(timed, key=lambda r: (r["late_ns"], -(r.get("rank") or 0)))
        if worst["late_ns"] >= STRAGGLER_NS:
            others = [int(r.get("comm_ns") or 0) for r in timed if r is not worst]
            return Straggler(worst, sum(others) // len(others), str(worst.get("cause") or ""))
    return slowest(rows)


def slowest(rows: list[dict[str, Any]]) -> Slowest | None:
    """The rank with the longest mean step; where no rank marks steps, the one with the
    most compute time (the others wait for it in their collectives).  None with fewer than
    two ranks to compare, or none slower than another."""
    stepped = [r for r in rows if r.get("steps")]
    if stepped:
        key, criterion, pool = "step_mean_ns", "mean step time", stepped
    else:
        key, criterion = "compute_ns", "compute time"
        pool = [r for r in rows if r.get("compute_ns")]
    if len(pool) < 2:
        return None
    worst = max(pool, key=lambda r: (r[key], -(r.get("rank") or 0)))
    best = min(int(r[key]) for r in pool)
    if int(worst[key]) <= best:
        return None
    return Slowest(worst, criterion, int(worst[key]), best, len(pool))


def section(rows: list[dict[str, Any]], batch: bool, steps: str) -> Section:
    """The table for a person; of a batch, each trace named by the shortest end of its path
    that tells it from the others (JSON and CSV keep the path as given)."""
    columns = (TRACE_COLUMN, *COLUMNS) if batch else COLUMNS
    note = (
        f"NCCL exposed = NCCL kernel time no compute kernel of the same GPU overlaps; "
        f"steps = slices named {steps!r}"
    )
    if batch:
        labels, ext = trace_labels(rows)
        rows = [{**r, "trace": labels[str(r["trace"])]} for r in rows]
        note += f"; trace = the end of its path{f', without {ext}' if ext else ''}"
    return Section(
        "ranks",
        "Per rank: GPU busy, computation vs communication (NCCL), exposed communication, steps",
        columns,
        rows,
        "no GPU ops and no step slices in this trace",
        note,
    )


def trace_labels(rows: list[dict[str, Any]]) -> tuple[dict[str, str], str]:
    """Each row's trace path -> its name in the table (the shortest end of the path that
    tells it from the others, less the extension all share), and that extension."""
    tails = distinct_tails([str(r["trace"]) for r in rows if r.get("trace") is not None])
    ext = _common_extension(list(tails.values()))
    return {path: tail.removesuffix(ext) for path, tail in tails.items()}, ext


def _common_extension(labels: list[str]) -> str:
    """The file extension (from the name's first dot) every label ends in, else ''; it says
    nothing in a column of traces and takes a third of a narrow one."""
    exts = {label.rsplit("/", 1)[-1].partition(".")[1:] for label in labels}
    if len(exts) != 1:
        return ""
    dot, rest = exts.pop()
    names_left = all(label.rsplit("/", 1)[-1].partition(".")[0] for label in labels)
    return dot + rest if dot and rest and names_left else ""
