"""What the GPU counters cost the program: the launch-bound training step recorded with and
without them, on the GPU machine.

    python3 bench/gpu_metrics_cost.py OUT [--rounds 10] [--steps 2000] [--mode NAME=FLAGS ...]
        [--pin CPUS] [--no-aslr] [--budget-s SECONDS]

Each run is a fresh `record --no-cpu` of bench/workloads/launch_bound.py (the shape where a
per-launch or per-sample cost shows most), which prints its median ms/step.  The modes run
in ABBA order round by round (A B B A, then B A A B, ...), so a drift of the machine over
the minutes of the benchmark (clocks, other tenants) falls on both alike; the cost is the
median over rounds of each round's ratio to the reference mode, beside the ratio of the
modes' medians, and a bootstrap 95% interval of that median (resampled rounds), which is
what can say "at most 1%".

One run of this step moves ~10% from one process to the next when the processes land on
any core with a random address layout: --pin runs every process (record and target) on
the same CPUs (taskset) and --no-aslr without address randomisation (setarch -R), with a
fixed PYTHONHASHSEED always, so that what differs between the modes is the modes.
--budget-s stops starting rounds once that much time has passed (the device tool's
per-call limit).  Prints a table and writes OUT/gpu_metrics_cost.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_MODES = {
    "no counters": "--no-gpu-metrics",
    "counters (default)": "",
}


def run_once(flags: str, steps: int, trace: Path, prefix: list[str]) -> tuple[float, float | None]:
    """The run's median ms/step, and where PM sampling ran, its thread's busy share of the
    time it sampled (record's summary line), else None."""
    work = ["python3", "-m", "bench.workloads.launch_bound", "--steps", str(steps)]
    cmd = ["python3", "-m", "collector.cli", "record", "--no-cpu", "-o", str(trace)]
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    proc = subprocess.run(
        [*prefix, *cmd, *flags.split(), "--", *work], capture_output=True, text=True, env=env
    )
    found = re.search(r"([0-9.]+) ms/step", proc.stdout)
    if not found:
        print(f"run failed ({flags or 'default'}): {proc.stderr[-600:]}", file=sys.stderr)
        return float("nan"), None
    busy = re.search(r"its thread: .* sampled \(([0-9.]+)%\)", proc.stderr)
    return float(found.group(1)), float(busy.group(1)) if busy else None


def bootstrap_interval(ratios: list[float], draws: int = 10000) -> tuple[float, float]:
    """95% interval of the median of `ratios`, rounds resampled with replacement."""
    rng = random.Random(0)
    medians = sorted(statistics.median(rng.choices(ratios, k=len(ratios))) for _ in range(draws))
    return medians[int(0.025 * draws)], medians[int(0.975 * draws) - 1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out", type=Path)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--mode", action="append", default=[], help="NAME=FLAGS (record flags)")
    p.add_argument("--pin", help="CPUs for every run (taskset -c), e.g. 2-5")
    p.add_argument("--no-aslr", action="store_true", help="runs without ASLR (setarch -R)")
    p.add_argument("--budget-s", type=float, help="start no round after this many seconds")
    args = p.parse_args()
    prefix = (["taskset", "-c", args.pin] if args.pin else []) + (
        ["setarch", os.uname().machine, "-R"] if args.no_aslr else []
    )
    started = time.monotonic()
    modes = dict(m.split("=", 1) for m in args.mode) if args.mode else DEFAULT_MODES
    names = list(modes)
    reference = names[0]
    args.out.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[float | None]] = {n: [] for n in names}
    busy: dict[str, list[float]] = {n: [] for n in names}
    for r in range(args.rounds):
        if args.budget_s and time.monotonic() - started > args.budget_s:
            print(f"time budget spent: {r} rounds", flush=True)
            break
        order = names + names[::-1] if r % 2 == 0 else names[::-1] + names
        got: dict[str, list[float]] = {n: [] for n in names}
        for name in order:
            ms, busy_pct = run_once(
                modes[name], args.steps, args.out / "cost.perfetto-trace", prefix
            )
            if ms == ms:  # not NaN: the run printed its step time
                got[name].append(ms)
            if busy_pct is not None:
                busy[name].append(busy_pct)
        for name in names:
            runs[name].append(statistics.mean(got[name]) if got[name] else None)
        print(f"round {r + 1}: " + "  ".join(f"{n} {runs[n][-1]}" for n in names), flush=True)
    result: dict[str, object] = {
        "steps": args.steps,
        "rounds": len(runs[reference]),
        "pin": args.pin,
        "no_aslr": args.no_aslr,
        "modes": {},
    }
    ref_runs = runs[reference]
    for name in names:
        ok = [x for x in runs[name] if x is not None]
        ratios = [
            x / ref - 1
            for x, ref in zip(runs[name], ref_runs, strict=True)
            if x is not None and ref is not None
        ]
        low, high = bootstrap_interval(ratios) if ratios else (None, None)
        result["modes"][name] = {  # type: ignore[index]
            "flags": modes[name],
            "runs_ms": runs[name],
            "median_ms": statistics.median(ok) if ok else None,
            "median_round_ratio_pct": 100 * statistics.median(ratios) if ratios else None,
            "round_ratio_ci95_pct": [100 * low, 100 * high] if ratios else None,
            "pm_thread_busy_pct": busy[name],
        }
    ref_median = result["modes"][reference]["median_ms"]  # type: ignore[index]
    print(
        f"{'mode':24s} {'median ms/step':>15s} {'vs ref (medians)':>17s} "
        f"{'median round ratio':>19s} {'95% interval':>18s}"
    )
    for name, m in result["modes"].items():  # type: ignore[attr-defined]
        vs = (m["median_ms"] / ref_median - 1) * 100 if m["median_ms"] and ref_median else None
        m["vs_reference_medians_pct"] = vs
        print(
            f"{name:24s} {m['median_ms'] or 0:15.3f} {vs or 0:+16.2f}% "
            f"{m['median_round_ratio_pct'] or 0:+18.2f}% "
            + (
                "{:+.2f}% .. {:+.2f}%".format(*m["round_ratio_ci95_pct"])
                if m["round_ratio_ci95_pct"]
                else "-"
            )
        )
    for name in names:
        if busy[name]:
            print(
                f"{name}: PM sampling's thread busy {statistics.median(busy[name]):.3f}% "
                f"of the time it sampled (median of {len(busy[name])} runs; max "
                f"{max(busy[name]):.3f}%)"
            )
    (args.out / "gpu_metrics_cost.json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
