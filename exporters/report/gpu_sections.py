"""The report's GPU counter and device memory sections: counters per device, kernels ranked
by their counters, counters per step (the slowest steps), and each GPU's memory peak with the
allocation sites that held it (exporters/analysis/gpu_metrics.py, device_memory.py)."""

from __future__ import annotations

from collector.frame_names import kernel_labels
from collector.gpu_metrics import catalog
from exporters.analysis import device_memory, gpu_metrics
from exporters.analysis.analyze import Analysis
from exporters.analysis.idle import Site
from exporters.perfetto.engine.trace_processor import Trace
from exporters.report import units
from exporters.report.sections import Column, Section


def _unit(metric: str) -> str:
    """A counter's unit: the catalog's, else the one its track name ends with
    (`GPU utilization %`, `SM clock MHz`)."""
    if metric in _UNITS:
        return _UNITS[metric]
    last = metric.rsplit(" ", 1)[-1]
    return last if last in ("%", "MHz", "W", "MiB/s") else ""


def _value(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "%":
        return units.percent(value)
    if unit == "bytes":
        return units.byte_count(value)
    text = f"{value:,.0f} {unit}" if abs(value) >= 100 else f"{value:.3g} {unit}"
    return text.strip()


def gpu_sections(trace: Trace, analysis: Analysis, top: int) -> list[Section]:
    """The sections, or none where the trace has no counter track under a GPU (recorded
    without counters, converted from Kineto)."""
    gpu_metrics.load(trace)
    if not trace.scalar("select count(*) from xpu_gpu_counter"):
        return []
    return [
        _device_section(trace),
        _kernel_section(trace, top),
        _step_section(trace, analysis, top),
        _memory_section(trace, top),
    ]


def _device_section(trace: Trace) -> Section:
    counters = gpu_metrics.device_counters(trace)
    rows = [
        {
            "device": c.device,
            "metric": c.metric,
            "mean": _value(c.mean, _unit(c.metric)),
            "peak": _value(c.peak, _unit(c.metric)),
            "values": c.values,
        }
        for c in counters
    ]
    return Section(
        "gpu_counters",
        "GPU counters per device (time-weighted mean over the recording)",
        (
            Column("device", "device"),
            Column("metric", "counter"),
            Column("mean", "mean"),
            Column("peak", "peak"),
            Column("values", "values", "count"),
        ),
        rows,
        "no GPU counters (record --gpu-metrics; the summary says why a source was refused)",
    )


def _kernel_section(trace: Trace, top: int) -> Section:
    metrics, rows = gpu_metrics.kernel_table(trace, top)
    labels = kernel_labels([str(r["name"]) for r in rows])
    for row in rows:
        row["name_full"] = row["name"]
        row["name"] = labels[str(row["name"])]
    columns = [
        Column("name", "kernel", "kernel"),
        Column("kernels", "kernels", "count"),
        Column("gpu_ns", "GPU time", "ns"),
    ]
    for i, metric in enumerate(metrics):
        columns.append(Column(f"m{i}", _SHORT.get(metric, metric)))
        for row in rows:
            row[f"m{i}"] = _value(row.get(metric), "%")
    return Section(
        "kernel_counters",
        "Kernels by GPU counters (each counter's mean over the kernels' intervals)",
        tuple(columns),
        rows,
        "no kernel overlaps a GPU counter value (GPM counters: record on Hopper or later)",
        "tensor active high and DRAM low: compute-bound on the tensor pipes; DRAM high and "
        "tensor ~0: memory-bound; a counter is a device-wide mean, so concurrent kernels share it",
    )


def _step_section(trace: Trace, analysis: Analysis, top: int) -> Section:
    steps = analysis.steps.slowest[:top]
    numbers = [
        int(r["step"])
        for s in steps
        for r in trace.query(f"select step from xpu_step where ts = {s.ts} and dur = {s.dur}")
    ]
    means = gpu_metrics.step_means(trace, numbers)
    rows = []
    for step in numbers:
        for device in sorted({d for (n, d, _m) in means if n == step}):
            row: dict = {"step": step, "device": device}
            for i, metric in enumerate(gpu_metrics.STEP_METRICS):
                row[f"m{i}"] = _value(means.get((step, device, metric)), "%")
            rows.append(row)
    return Section(
        "step_counters",
        "GPU counters per step (the slowest steps)",
        (
            Column("step", "step", "id"),
            Column("device", "device"),
            *(Column(f"m{i}", _SHORT.get(m, m)) for i, m in enumerate(gpu_metrics.STEP_METRICS)),
        ),
        rows,
        "no steps with GPU counter values",
    )


def _memory_section(trace: Trace, top: int) -> Section:
    rows = []
    for peak in device_memory.peaks(trace, top):
        first = True
        sites: list[Site | None] = [*peak.sites] or [None]  # a peak with no site: one row
        for site in sites:
            rows.append(
                {
                    "device": peak.device if first else "",
                    "peak": units.byte_count(peak.bytes) if first else "",
                    "at": _at(trace, peak.ts) if first else "",
                    "site": site.location if site else "-",
                    "held": site.ns if site else None,
                    "allocations": site.count if site else None,
                }
            )
            first = False
    return Section(
        "memory_peak",
        "Device memory peak and the allocation sites holding it",
        (
            Column("device", "device"),
            Column("peak", "peak"),
            Column("at", "at"),
            Column("site", "allocation site", "name"),
            Column("held", "held at peak", "bytes"),
            Column("allocations", "allocations", "count"),
        ),
        rows,
        "no device memory allocations recorded (--kinds memory; PyTorch's caching allocator "
        "allocates in large segments that it reuses)",
    )


def _at(trace: Trace, ts: int) -> str:
    start = trace.scalar("select start_ts from trace_bounds") or 0
    return f"+{units.duration(ts - start)}"


# Short column titles (terminal tables cut long ones).
_SHORT = {
    catalog.TENSOR_ACTIVE: "tensor %",
    catalog.DRAM_BANDWIDTH: "DRAM bw %",
    catalog.SM_ACTIVE: "SM active %",
    catalog.SM_OCCUPANCY: "occupancy %",
}
# Each counter's unit, for the cells.
_UNITS = {
    c.name: c.unit
    for c in (
        *catalog.GPM_COUNTERS,
        *catalog.DEVICE_COUNTERS,
        *catalog.UTILIZATION_COUNTERS,
        catalog.Counter(catalog.MEMORY_IN_USE, "bytes"),
        *(catalog.Counter(c.name, c.unit) for c in catalog.PM_COUNTERS),
    )
}
