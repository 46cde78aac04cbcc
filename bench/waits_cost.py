"""The cost of blocked-time capture (cupti_inject/src/waits.c), on this machine.

    PYTHONPATH=$PWD .venv/bin/python bench/waits_cost.py [--rounds 7] [--json OUT]

bench/waits_cost.c runs each loop under four settings, interleaved round by round (medians):
  none       no library
  lib, off   the sampler library (999 Hz) with blocked-time capture off (--wait-threshold 0):
             the wrappers call straight through
  100 us     the library with the default threshold
  1 us       the library recording every blocking call (the `over` loop: each call recorded)
Per call under the threshold (poll(0), an uncontended lock, a read that finds data): the
100 us row minus the off row, in the loop thread's CPU time (these three loops are compared
in CPU time, the others in wall time).  Per recorded wait: the `over` loop's 1 us row minus its off
row, and the library's own count of its recording time (cpu_wait_record_ns / cpu_waits).  The
launch-bound step (200 launches of ~2 us with two locks and a poll each, then a ~300 us
synchronisation recorded as a wait): the step's wall time and its launching thread's CPU
time at 100 us against off (on a loaded machine the CPU time is the one that resolves it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collector.inject_build import build_sampler  # noqa: E402
from collector.sources.cpu_stream import InprocessCpuSource  # noqa: E402

LOOPS = {"poll": 1_000_000, "mutex": 5_000_000, "read": 200_000, "over": 5_000, "step": 300}
# Loops whose cost is the calls' own CPU time (compared in the main thread's CPU time, which a
# loaded machine's preemption does not inflate); the others block, so wall time.
CPU_LOOPS = ("poll", "mutex", "read")
SETTINGS = {"none": None, "lib, off": "0", "100 us": "100", "1 us": "1"}
# The step's CPU time in its launching thread, by threshold (its launch path is CPU-bound).
STEP_CPU: dict[str | None, list[float]] = {}


def run(exe: Path, loop: str, threshold: str | None, library: Path) -> tuple[float, dict]:
    """ns per iteration (CPU time for CPU_LOOPS, else wall), and the library's wait counters
    (empty without it)."""
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="xpu-waits-bench-") as out:
        if threshold is not None:
            env.update(
                LD_PRELOAD=str(library),
                XPU_PERF_CPU_HZ="999",
                XPU_PERF_CPU_OUT_DIR=out,
                XPU_PERF_WAIT_THRESHOLD_US=threshold,
            )
        proc = subprocess.run(
            [str(exe), loop, str(LOOPS[loop])], capture_output=True, text=True, env=env, check=True
        )
        out_json = json.loads(proc.stdout)
        ns = out_json["cpu_ns_per_iter" if loop in CPU_LOOPS else "ns_per_iter"]
        if loop == "step":
            STEP_CPU.setdefault(threshold, []).append(out_json["cpu_ns_per_iter"])
        counts: dict = {}
        if threshold is not None:
            source = InprocessCpuSource(Path(out))
            for _ in source.events():
                pass
            counts = {k: v for k, v in source.counts.items() if "wait" in k}
    return ns, counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--json", type=Path, default=REPO / "bench/results/waits_cost.json")
    args = ap.parse_args()
    library = build_sampler()
    with tempfile.TemporaryDirectory(prefix="xpu-waits-bench-") as tmp:
        exe = Path(tmp) / "waits_cost"
        subprocess.run(
            ["gcc", "-O2", "-g", "-pthread", "-o", str(exe), str(REPO / "bench/waits_cost.c")],
            check=True,
        )
        times: dict[str, dict[str, list[float]]] = {
            loop: {s: [] for s in SETTINGS} for loop in LOOPS
        }
        per_wait: list[float] = []
        waits_per_step: list[float] = []
        for _ in range(args.rounds):
            for loop in LOOPS:
                for setting, threshold in SETTINGS.items():
                    ns, counts = run(exe, loop, threshold, library)
                    times[loop][setting].append(ns)
                    if loop == "over" and setting == "1 us" and counts.get("waits"):
                        per_wait.append(counts["wait_record_ns"] / counts["waits"])
                    if loop == "step" and setting == "100 us":
                        waits_per_step.append(counts.get("waits", 0) / LOOPS["step"])
    med = {loop: {s: statistics.median(v) for s, v in row.items()} for loop, row in times.items()}
    result = {
        "rounds": args.rounds,
        "ns_per_iteration": med,
        "under_threshold_ns_per_call": {
            loop: med[loop]["100 us"] - med[loop]["lib, off"] for loop in ("poll", "mutex", "read")
        },
        "recorded_wait_ns": {
            "wall_difference": med["over"]["1 us"] - med["over"]["lib, off"],
            "library_count": statistics.median(per_wait) if per_wait else None,
        },
        "step": {
            "off_us": med["step"]["lib, off"] / 1e3,
            "capture_us": med["step"]["100 us"] / 1e3,
            "overhead_pct": 100 * (med["step"]["100 us"] / med["step"]["lib, off"] - 1),
            "waits_per_step": statistics.median(waits_per_step) if waits_per_step else 0,
            "cpu_off_us": statistics.median(STEP_CPU["0"]) / 1e3,
            "cpu_capture_us": statistics.median(STEP_CPU["100"]) / 1e3,
            "cpu_overhead_pct": 100
            * (statistics.median(STEP_CPU["100"]) / statistics.median(STEP_CPU["0"]) - 1),
        },
    }
    print(
        f"{'loop':<8}"
        + "".join(f"{s:>14}" for s in SETTINGS)
        + "   (ns per iteration; CPU time: "
        + ", ".join(CPU_LOOPS)
        + ")"
    )
    for loop, row in med.items():
        print(f"{loop:<8}" + "".join(f"{row[s]:>14.1f}" for s in SETTINGS))
    for loop, ns in result["under_threshold_ns_per_call"].items():
        print(f"under the threshold, {loop}: {ns:+.1f} ns per call")
    rec = result["recorded_wait_ns"]
    print(
        f"per recorded wait: {rec['wall_difference']:+.0f} ns of wall time, "
        f"{rec['library_count'] or 0:.0f} ns counted by the library"
    )
    step = result["step"]
    print(
        f"launch-bound step: {step['off_us']:.1f} us off, {step['capture_us']:.1f} us with "
        f"capture ({step['overhead_pct']:+.2f}%), {step['waits_per_step']:.2f} waits per step; "
        f"its launching thread's CPU time {step['cpu_off_us']:.1f} us off, "
        f"{step['cpu_capture_us']:.1f} us with capture ({step['cpu_overhead_pct']:+.2f}%)"
    )
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
