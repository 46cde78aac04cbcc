"""Reads back what bench/gpu_metrics_gpu.sh left in its $OUT (fetched here): the phases'
counters, the kernels' counters, the memory peak and its sites, the overhead, the probes;
prints the tables of docs/benchmarks.md and writes them as JSON.

    python3 bench/gpu_metrics_report.py DIR [--json bench/results/gpu_metrics_h100.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.gpu_metrics import catalog
from exporters.analysis import device_memory, gpu_metrics
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

PHASES = ("idle", "gemm", "vector_add")
SHOWN = (
    catalog.SM_ACTIVE,
    catalog.SM_OCCUPANCY,
    catalog.TENSOR_ACTIVE,
    catalog.DRAM_BANDWIDTH,
    catalog.GPU_UTILIZATION,
    catalog.MEMORY_UTILIZATION,
    catalog.POWER,
    catalog.SM_CLOCK,
)


def phase_means(path: Path) -> dict[str, Any]:
    """Each phase's counter means (over its NVTX range), the metadata, the top kernels."""
    with open_trace(path) as trace:
        load_views(trace)
        gpu_metrics.load(trace)
        meta = {
            r["key"]: r["value"]
            for r in trace.query(
                "select key, coalesce(string_value, int_value, real_value) as value "
                "from xpu_metadata where key like 'gpu_metrics%'"
            )
        }
        phases = {}
        for name in PHASES:
            span = trace.query(
                f"select ts, ts + dur as end_ts from slice where name = '{name}' "
                "and category not in ('kernel', 'cuda_api') order by dur desc limit 1"
            )
            if not span:
                continue
            a, b = int(span[0]["ts"]), int(span[0]["end_ts"])
            rows = trace.query(
                f"""
                SELECT gc.metric,
                       SUM(s.value * (MIN(s.end_ts, {b}) - MAX(s.ts, {a}))) * 1.0
                       / SUM(MIN(s.end_ts, {b}) - MAX(s.ts, {a})) AS mean
                FROM _xpu_counter_step s JOIN xpu_gpu_counter gc USING (track_id)
                WHERE s.ts < {b} AND s.end_ts > {a} GROUP BY gc.metric
                """
            )
            phases[name] = {"dur_s": (b - a) / 1e9, **{r["metric"]: r["mean"] for r in rows}}
        metrics, kernels = gpu_metrics.kernel_table(trace, 6)
    return {"metadata": meta, "phases": phases, "kernel_metrics": metrics, "kernels": kernels}


def memory(path: Path) -> list[dict[str, Any]]:
    with open_trace(path) as trace:
        load_views(trace)
        return [
            {
                "device": p.device,
                "peak_mib": p.bytes / (1 << 20),
                "live_allocations": p.live_allocations,
                "sites": [(s.location, s.ns / (1 << 20), s.count) for s in p.sites],
            }
            for p in device_memory.peaks(trace)
        ]


def print_phases(res: dict[str, Any], shown: tuple[str, ...], name_width: int) -> None:
    """A phase_means result as text: each phase's means of the `shown` counters, then each
    kernel's counters."""
    print("  phase       " + " | ".join(f"{m[:16]:>16s}" for m in shown))
    for phase, values in res["phases"].items():
        cells = " | ".join(
            f"{values[m]:16.1f}" if values.get(m) is not None else f"{'-':>16s}" for m in shown
        )
        print(f"  {phase:11s} {cells}")
    for k in res["kernels"]:
        vals = ", ".join(f"{m} {k[m]:.1f}" for m in res["kernel_metrics"] if k[m] is not None)
        print(f"  kernel {k['name'][:name_width]}: {k['kernels']} x, {vals}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    d: Path = args.dir
    out: dict[str, Any] = {}
    for name in ("probe_root", "probe_nobody", "overhead"):
        f = d / f"{name}.json"
        if f.exists() and f.stat().st_size:
            try:
                out[name] = json.loads(f.read_text())
            except json.JSONDecodeError as exc:
                out[name] = f"unreadable: {exc}"
    for name in ("phases", "phases_nobody"):
        f = d / f"{name}.perfetto-trace"
        if f.exists():
            out[name] = phase_means(f)
    if (d / "memory.perfetto-trace").exists():
        out["memory"] = memory(d / "memory.perfetto-trace")
    for name in ("phases", "phases_nobody"):
        res = out.get(name)
        if not res:
            continue
        print(f"\n{name}: source {res['metadata'].get('gpu_metrics_source')}")
        print(f"  refused: {res['metadata'].get('gpu_metrics_refused')}")
        print_phases(res, SHOWN, 60)
    for peak in out.get("memory", []):
        print(f"\nmemory {peak['device']}: peak {peak['peak_mib']:.0f} MiB")
        for site in peak["sites"]:
            print(f"  {site[0]}: {site[1]:.0f} MiB in {site[2]}")
    if isinstance(out.get("overhead"), dict):
        print("\noverhead (launch_bound ms/step, median of 5 runs)")
        for mode, v in out["overhead"].items():
            print(f"  {mode:26s} {v['median_ms']:.3f}  {v['vs_no_counters_pct']:+.2f}%")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
