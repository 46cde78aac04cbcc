"""GPU counters per device, per step and per kernel (gpu_metrics.sql): the tables
`xpu_gpu_counter` and `xpu_kernel_metrics` and the summaries `report` shows."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from collector.gpu_metrics import catalog
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import Trace

# The counters a kernel is ranked by and shown with, in this order.
KERNEL_METRICS = (
    catalog.TENSOR_ACTIVE,
    catalog.DRAM_BANDWIDTH,
    catalog.SM_ACTIVE,
    catalog.SM_OCCUPANCY,
)


def load(trace: Trace) -> None:
    """The counter tables and the per-kernel ones (the shared views must be loaded); once
    per trace."""
    sql_modules.load(
        trace, "analysis.kernel_metrics", interval_metrics=list(catalog.INTERVAL_COUNTER_NAMES)
    )


@dataclass(frozen=True)
class DeviceCounter:
    device: str
    metric: str
    mean: float  # over the span the values cover, weighted by time
    peak: float
    values: int


def device_counters(trace: Trace) -> list[DeviceCounter]:
    """Per device and counter: its time-weighted mean and its peak."""
    load(trace)
    rows = trace.query(
        "select gc.device, gc.metric, "
        "sum(s.value * (s.end_ts - s.ts)) * 1.0 / sum(s.end_ts - s.ts) as mean, "
        "max(s.value) as peak, count(*) as n "
        "from _xpu_counter_step s join xpu_gpu_counter gc using (track_id) "
        "group by gc.track_id order by gc.device, gc.track_id"
    )
    return [
        DeviceCounter(
            str(r["device"]), str(r["metric"]), float(r["mean"]), float(r["peak"]), int(r["n"])
        )
        for r in rows
        if r["mean"] is not None
    ]


# The counters shown per step, in this order.
STEP_METRICS = (catalog.SM_ACTIVE, catalog.TENSOR_ACTIVE, catalog.DRAM_BANDWIDTH)


def step_means(trace: Trace, steps: list[int]) -> dict[tuple[int, str, str], float]:
    """(step number of xpu_step, GPU track name, counter) -> the counter's time-weighted
    mean over the step (STEP_METRICS; the analysis tables must be loaded)."""
    load(trace)
    if not steps:
        return {}
    metrics = ", ".join(f"'{m}'" for m in STEP_METRICS)
    rows = trace.query(
        f"""
        SELECT st.step, gc.device, gc.metric,
               SUM(s.value * (MIN(s.end_ts, st.end_ts) - MAX(s.ts, st.ts))) * 1.0
               / SUM(MIN(s.end_ts, st.end_ts) - MAX(s.ts, st.ts)) AS mean
        FROM xpu_step st
        JOIN _xpu_counter_step s ON s.ts < st.end_ts AND s.end_ts > st.ts
        JOIN xpu_gpu_counter gc ON gc.track_id = s.track_id
        WHERE gc.metric IN ({metrics}) AND st.step IN ({", ".join(map(str, steps))})
        GROUP BY st.step, gc.track_id
        """
    )
    return {(int(r["step"]), str(r["device"]), str(r["metric"])): float(r["mean"]) for r in rows}


def source_facts(trace: Trace) -> list[tuple[str, str]]:
    """What `record` said about the counters: the source that ran, what was refused."""
    meta = {
        r["key"]: r["value"]
        for r in trace.query(
            "select key, coalesce(string_value, int_value, real_value) as value from xpu_metadata "
            "where key in ('gpu_metrics_source', 'gpu_metrics_refused', 'gpu_metrics_rate_hz', "
            "'gpu_metrics_pm_coverage')"
        )
    }
    if "gpu_metrics_source" not in meta:
        return []
    rate = meta.get("gpu_metrics_rate_hz")
    facts = [
        ("GPU counters", f"{meta['gpu_metrics_source']}" + (f" at {rate:g} Hz" if rate else ""))
    ]
    if meta.get("gpu_metrics_refused"):
        facts.append(("GPU counters refused", str(meta["gpu_metrics_refused"])))
    if meta.get("gpu_metrics_pm_coverage"):
        facts.append(("GPU counters missed", str(meta["gpu_metrics_pm_coverage"])))
    return facts


def kernel_table(trace: Trace, top: int) -> tuple[list[str], list[dict[str, Any]]]:
    """Per kernel name: GPU time and its counters' time-weighted means over the kernels'
    intervals (KERNEL_METRICS that the trace has), the most GPU time first.  Returns the
    metrics shown and the rows.  Summed per name and grid interval first, so the cost
    follows names x intervals, not kernels x counters."""
    load(trace)
    present = {r["metric"] for r in trace.query("select distinct metric from xpu_gpu_counter")}
    metrics = [m for m in KERNEL_METRICS if m in present]
    if not metrics:
        return [], []
    listed = ", ".join(f"'{m}'" for m in metrics)
    means = trace.query(
        f"""
        WITH piece AS (
          SELECT name, device_track_id, ts, SUM(overlap) AS overlap
          FROM _xpu_kernel_piece GROUP BY name, device_track_id, ts
        )
        SELECT p.name, ic.metric, SUM(c.value * p.overlap) * 1.0 / SUM(p.overlap) AS mean
        FROM piece p
        JOIN _xpu_interval_counter ic USING (device_track_id)
        JOIN _xpu_counter_step c ON c.track_id = ic.track_id AND c.ts = p.ts
        WHERE ic.metric IN ({listed})
        GROUP BY p.name, ic.metric
        """
    )
    by_name: dict[str, dict[str, float]] = {}
    for r in means:
        by_name.setdefault(str(r["name"]), {})[str(r["metric"])] = float(r["mean"])
    rows = trace.query(
        "select name, count(*) as kernels, sum(end_ts - ts) as gpu_ns from _xpu_kernel "
        f"group by name order by gpu_ns desc limit {int(top)}"
    )
    return metrics, [
        {
            "name": r["name"],
            "kernels": r["kernels"],
            "gpu_ns": r["gpu_ns"],
            **{m: by_name.get(str(r["name"]), {}).get(m) for m in metrics},
        }
        for r in rows
        if str(r["name"]) in by_name
    ]
