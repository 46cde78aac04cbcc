"""Reads what bench/capture_window_gpu.sh left in its output folder (log.txt, the window
traces) and prints the table of docs/benchmarks.md; writes bench/results/capture_window_h100.json.

    python bench/capture_window_report.py OUT_DIR [--json bench/results/capture_window_h100.json]

Per mode: the whole run's ms per step, median over rounds, and the overhead against the plain
run.  Per window trace (cudaProfilerApi, NVTX, signal): its kernels against 50 steps' worth
(kernels per step from the 120-step whole recording), drops, GPU ops without their API call,
launches without a stack, CPU samples and whether all of them fall inside the window.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

WINDOW_STEPS = 50
_LINE = re.compile(r"^(\w+) (\d+) windowed \w+: ([0-9.]+) ms/run-step, median ([0-9.]+)")


def run_times(log: str) -> dict[str, list[float]]:
    times: dict[str, list[float]] = defaultdict(list)
    for line in log.splitlines():
        m = _LINE.match(line)
        if m:
            times[m.group(1)].append(float(m.group(3)))
    return dict(times)


def metadata(t, key: str) -> int:
    return int(t.scalar(f"select int_value from xpu_metadata where key = '{key}'") or 0)


def window_trace(path: Path, per_step: float) -> dict[str, object]:
    with open_trace(path) as t:
        load_views(t)
        kernels = t.scalar("select count(*) from slice where category = 'kernel'")
        windows = t.query(
            "select ts, ts + dur as end_ts from slice where category = 'xpu_perf_window'"
        )
        samples = t.scalar("select count(*) from xpu_cpu_sample")
        inside = sum(
            t.scalar(
                f"select count(*) from xpu_cpu_sample where ts between {w['ts']} and {w['end_ts']}"
            )
            for w in windows
        )
        return {
            "kernels": kernels,
            "steps_in_window": round(kernels / per_step, 2) if per_step else None,
            "windows": len(windows),
            "cupti_dropped": metadata(t, "cupti_dropped_records"),
            "transport_dropped": metadata(t, "cupti_transport_dropped_rows"),
            "gpu_ops_without_api": metadata(t, "cupti_gpu_ops_without_api"),
            "launches_without_stack": metadata(t, "cupti_launches_without_stack"),
            "cpu_samples": samples,
            "cpu_samples_outside_windows": samples - inside,
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--json", type=Path, default=Path("bench/results/capture_window_h100.json"))
    args = ap.parse_args()
    times = run_times((args.out / "log.txt").read_text())
    medians = {mode: statistics.median(v) for mode, v in times.items()}
    plain = medians["plain"]
    overhead = {mode: round(100 * (m / plain - 1), 1) for mode, m in medians.items()}
    with open_trace(args.out / "full120.perfetto-trace") as t:
        per_step = t.scalar("select count(*) from slice where category = 'kernel'") / 120
    traces = {
        name: window_trace(args.out / f"{name}.perfetto-trace", per_step)
        for name in ("window", "nvtx", "signal")
        if (args.out / f"{name}.perfetto-trace").exists()
    }
    print(f"{'mode':<12} {'rounds':>6} {'median ms/step':>15} {'vs plain':>9}")
    for mode, m in medians.items():
        print(f"{mode:<12} {len(times[mode]):>6} {m:>15.4f} {overhead[mode]:>+8.1f}%")
    print(f"\nkernels per step (whole recording of 120 steps): {per_step:g}")
    for name, facts in traces.items():
        print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    result = {
        "machine": "H100 (device tool), torch 2.11+cu130",
        "script": "bench/capture_window_gpu.sh",
        "workload": "bench/workloads/windowed --steps 3000 --first 1000 --window 50",
        "ms_per_run_step": times,
        "median": medians,
        "overhead_vs_plain_pct": overhead,
        "kernels_per_step_whole_run": per_step,
        "window_traces": traces,
    }
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
