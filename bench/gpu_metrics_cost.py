"""What the GPU counters cost the program: the launch-bound training step recorded with and
without them, on the GPU machine.

    python3 bench/gpu_metrics_cost.py OUT [--rounds 10] [--steps 2000] [--mode NAME=FLAGS ...]

Each run is a fresh `record --no-cpu` of bench/workloads/launch_bound.py (the shape where a
per-launch or per-sample cost shows most), which prints its median ms/step.  The modes run
in ABBA order round by round (A B B A, then B A A B, ...), so a drift of the machine over
the minutes of the benchmark (clocks, other tenants) falls on both alike; the cost is the
median over rounds of each round's ratio to the reference mode, beside the ratio of the
modes' medians.  Prints a table and writes OUT/gpu_metrics_cost.json.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_MODES = {
    "no counters": "--no-gpu-metrics",
    "counters (default)": "",
}


def run_once(flags: str, steps: int, trace: Path) -> float | None:
    work = ["python3", "-m", "bench.workloads.launch_bound", "--steps", str(steps)]
    cmd = ["python3", "-m", "collector.cli", "record", "--no-cpu", "-q", "-o", str(trace)]
    proc = subprocess.run([*cmd, *flags.split(), "--", *work], capture_output=True, text=True)
    found = re.search(r"([0-9.]+) ms/step", proc.stdout)
    if not found:
        print(f"run failed ({flags or 'default'}): {proc.stderr[-600:]}", file=sys.stderr)
        return None
    return float(found.group(1))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--mode", action="append", default=[], help="NAME=FLAGS (record flags)")
    args = p.parse_args()
    modes = dict(m.split("=", 1) for m in args.mode) if args.mode else DEFAULT_MODES
    names = list(modes)
    reference = names[0]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[float | None]] = {n: [] for n in names}
    for r in range(args.rounds):
        order = names + names[::-1] if r % 2 == 0 else names[::-1] + names
        got: dict[str, list[float]] = {n: [] for n in names}
        for name in order:
            ms = run_once(modes[name], args.steps, args.out / "cost.perfetto-trace")
            if ms is not None:
                got[name].append(ms)
        for name in names:
            runs[name].append(statistics.mean(got[name]) if got[name] else None)
        print(f"round {r + 1}: " + "  ".join(f"{n} {runs[n][-1]}" for n in names), flush=True)
    result: dict[str, object] = {"steps": args.steps, "rounds": args.rounds, "modes": {}}
    ref_runs = runs[reference]
    for name in names:
        ok = [x for x in runs[name] if x is not None]
        ratios = [
            x / ref - 1
            for x, ref in zip(runs[name], ref_runs, strict=True)
            if x is not None and ref is not None
        ]
        result["modes"][name] = {  # type: ignore[index]
            "flags": modes[name],
            "runs_ms": runs[name],
            "median_ms": statistics.median(ok) if ok else None,
            "median_round_ratio_pct": 100 * statistics.median(ratios) if ratios else None,
        }
    ref_median = result["modes"][reference]["median_ms"]  # type: ignore[index]
    print(
        f"{'mode':24s} {'median ms/step':>15s} {'vs ref (medians)':>17s} "
        f"{'median round ratio':>19s}"
    )
    for name, m in result["modes"].items():  # type: ignore[attr-defined]
        vs = (m["median_ms"] / ref_median - 1) * 100 if m["median_ms"] and ref_median else None
        m["vs_reference_medians_pct"] = vs
        print(
            f"{name:24s} {m['median_ms'] or 0:15.3f} {vs or 0:+16.2f}% "
            f"{m['median_round_ratio_pct'] or 0:+18.2f}%"
        )
    (args.out / "gpu_metrics_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
