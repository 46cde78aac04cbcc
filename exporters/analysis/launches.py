"""Launch statistics, copies and kernel-type overlap (launches.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace, sql_literal


def load_stack_lookup(trace: Trace) -> None:
    """`_xpu_launch_stack_at`: the launch stack of an API call by thread and time (what
    idle.call_sites joins), once per trace."""
    sql_modules.load(trace, "analysis.launch_stack_at")


def load(trace: Trace) -> None:
    load_stack_lookup(trace)
    if sql_modules.loaded(trace, "analysis.launches") is None:
        sql_modules.load(trace, "analysis.launches")
        # numpy, imported here: not for a `folded` answered from the result cache
        from exporters.analysis import kernel_overlap, stream_queue

        sql_modules.once(trace, "xpu_stream_queue", stream_queue.create)
        sql_modules.once(trace, "xpu_kernel_overlap", kernel_overlap.create)


@dataclass(frozen=True)
class LaunchStats:
    launches: int
    shorter_than_call: int  # kernels that ran shorter than their launch call took
    latency_p50_ns: int
    latency_p99_ns: int
    kernel_p50_ns: int
    call_p50_ns: int
    kernels: list[dict[str, Any]]  # per kernel name, most launched first
    queues: list[dict[str, Any]]  # per stream
    copies: list[dict[str, Any]]  # per direction and host memory
    overlap: list[dict[str, Any]]  # per device and kind


def _nearest_rank(trace: Trace, column: str, where: str = "1") -> int:
    n = trace.scalar(f"select count(*) from xpu_launch where {where}") or 0
    if not n:
        return 0
    rank = (n * 50 + 99) // 100
    value = trace.scalar(
        f"select {column} from xpu_launch where {where} order by {column} limit 1 offset {rank - 1}"
    )
    return int(value or 0)


def _copies(trace: Trace) -> list[dict[str, Any]]:
    """Copies per direction and host memory, most time first.  The p50 is the nearest rank
    among the group's copies sorted by bandwidth (those without one first, as SQLite sorts
    NULLs), looked up per group: cheaper than a rank window over every copy."""
    groups = trace.query(
        "select direction, host_memory, count(*) as copies, sum(bytes) as bytes, "
        "sum(dur) as total_ns, min(gb_per_s) as min_gb_per_s, max(gb_per_s) as max_gb_per_s, "
        "count(gb_per_s) as m from xpu_copy group by direction, host_memory "
        "order by total_ns desc"
    )
    rows = []
    for g in groups:
        rank = (int(g["m"]) * 50 + 99) // 100
        p50 = (
            trace.scalar(
                f"select gb_per_s from xpu_copy where direction is {sql_literal(g['direction'])} "
                f"and host_memory is {sql_literal(g['host_memory'])} "
                f"order by gb_per_s limit 1 offset {rank - 1}"
            )
            if rank
            else None
        )
        rows.append(
            {
                "direction": g["direction"],
                "host_memory": g["host_memory"] or "",
                "copies": g["copies"],
                "bytes": g["bytes"],
                "total_ns": g["total_ns"],
                "min_gb_per_s": g["min_gb_per_s"],
                "p50_gb_per_s": p50,
                "max_gb_per_s": g["max_gb_per_s"],
            }
        )
    return rows


def launch_stats(trace: Trace, top: int = 10) -> LaunchStats:
    load(trace)
    totals = trace.query(
        "select count(*) as n, coalesce(sum(shorter_than_call), 0) as short "
        "from xpu_launch where category = 'kernel'"
    )[0]
    n = int(totals["n"])
    p99_rank = max(1, (n * 99 + 99) // 100)
    p99 = trace.scalar(
        "select latency_ns from xpu_launch where category = 'kernel' order by latency_ns "
        f"limit 1 offset {p99_rank - 1}"
    )
    return LaunchStats(
        launches=n,
        shorter_than_call=int(totals["short"]),
        latency_p50_ns=_nearest_rank(trace, "latency_ns", "category = 'kernel'"),
        latency_p99_ns=int(p99 or 0),
        kernel_p50_ns=_nearest_rank(trace, "dur", "category = 'kernel'"),
        call_p50_ns=_nearest_rank(trace, "api_dur", "category = 'kernel'"),
        kernels=trace.query(
            f"select * from xpu_launch_kernel_stats order by launches desc limit {int(top)}"
        ),
        queues=trace.query(
            "select * from xpu_stream_queue order by launches desc, device_track_id, stream"
        ),
        copies=_copies(trace),
        overlap=trace.query(
            "select t.name as device, o.kind, o.overlap_ns from xpu_kernel_overlap o "
            "join track t on t.id = o.device_track_id order by o.overlap_ns desc"
        ),
    )
