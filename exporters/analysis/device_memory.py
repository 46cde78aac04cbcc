"""Device memory (device_memory.sql): each GPU's peak of memory in use, when it was reached,
and the allocation sites holding the most of it at that moment (the innermost user frame
of each allocation call's launch stack, as the idle analysis names launch sites)."""

from __future__ import annotations

from dataclasses import dataclass

from exporters.analysis import gpu_metrics, launches
from exporters.analysis.idle import Site, call_sites
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace


@dataclass(frozen=True)
class MemoryPeak:
    device: str  # the GPU's track name
    ts: int
    bytes: int
    live_allocations: int  # allocations held at the peak
    sites: list[Site]  # by bytes held at the peak (Site.ns is bytes here)


def load(trace: Trace) -> None:
    """The tables (the shared views must be loaded); once per trace."""
    gpu_metrics.load(trace)
    launches.load_stack_lookup(trace)
    sql_modules.load(trace, "analysis.device_memory")


def peaks(trace: Trace, top: int = 5) -> list[MemoryPeak]:
    """Per GPU with a `device memory in use` track: its peak and what held it."""
    load(trace)
    out = []
    for p in trace.query(
        "select device, device_no, ts, bytes from xpu_memory_peak order by device"
    ):
        device, ts = int(p["device_no"]), int(p["ts"])
        live = (
            f"FROM xpu_allocation a WHERE a.device_no = {device} AND a.ts <= {ts} "
            f"AND (a.free_ts IS NULL OR a.free_ts > {ts})"
        )
        count = trace.scalar(f"select count(*) {live}") or 0
        sites = call_sites(
            trace,
            f"SELECT a.id AS call_id, a.ts, a.utid, a.bytes AS ns, a.name AS detail {live}",
            top,
        )
        out.append(MemoryPeak(str(p["device"]), int(p["ts"]), int(p["bytes"]), int(count), sites))
    return out
