"""Issue 25 on the GPU machine: the program's own torch.profiler under `record`, from the runs
bench/coexist_gpu.sh leaves in a directory (per run NAME: NAME.stdout with the workload's
JSON line, NAME.stderr, Kineto traces NAME.k.N.json, kept streams NAME.streams/).  Prints a
table and writes results.json:
- per run and Kineto trace: its kernels, its ProfilerStep spans, and how many kernels start
  at or after their cudaLaunchKernel (matched by correlation id; a kernel record left in
  another clock fails that) and inside the trace's steps;
- per recorded run, from its kept streams: our kernels, capture windows (start and end set
  against the active steps' ProfilerStep spans, on CLOCK_MONOTONIC through the workload's
  clock pair) and our kernels launched in each window;
- step times: median ms of the active steps and of the plain steps (from step 40 on).

    python3 bench/coexist_report.py DIR RUN...
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

from collector.sources.cupti_stream import read_stream

PLAIN_FROM = 40  # steps after the schedule's two traces (36 steps) and its last processing


def workload(run_dir: Path, name: str) -> dict:
    for line in (run_dir / f"{name}.stdout").read_text().splitlines():
        if line.startswith("profiled_steps: "):
            return json.loads(line.removeprefix("profiled_steps: "))
    return {}


def kineto(path: Path, to_mono: int) -> dict:
    """Kernels of one Kineto trace, its ProfilerStep spans (CLOCK_MONOTONIC ns), and the
    kernels whose start is at or after their launch call's and inside its steps."""
    trace = json.loads(path.read_text())
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    base = int(trace.get("baseTimeNanoseconds", 0))

    def ns(us: float) -> int:
        return base + round(us * 1000) - to_mono

    kernels = [e for e in events if e.get("cat") == "kernel"]
    launches = {
        e["args"].get("correlation"): e
        for e in events
        if e.get("cat") == "cuda_runtime" and "args" in e and "correlation" in e["args"]
    }
    steps = sorted(
        (ns(e["ts"]), ns(e["ts"] + e["dur"]))
        for e in events
        if str(e.get("name", "")).startswith("ProfilerStep#")
    )
    after_launch = sum(
        1
        for k in kernels
        if k.get("args", {}).get("correlation") in launches
        and k["ts"] >= launches[k["args"]["correlation"]]["ts"]
    )
    lo = steps[0][0] if steps else 0
    hi = steps[-1][1] + 50_000_000 if steps else 0  # a step's kernels may end after it
    in_steps = sum(1 for k in kernels if lo <= ns(k["ts"]) <= hi)
    return {
        "kernels": len(kernels),
        "launch_calls": len(launches),
        "kernels_after_launch": after_launch,
        "kernels_in_steps": in_steps,
        "steps": steps,
    }


def streams(directory: Path) -> dict:
    """Our kernels and windows over every process's kept stream, and per window the kernels
    whose launch call (its correlation id, or a nested driver call's) began in it."""
    kernels = 0
    windows: list[tuple[int, int, str]] = []
    in_window: list[int] = []
    counters: dict[str, int] = {}
    for path in sorted(directory.glob("cupti-*.xpstream")):
        stream = read_stream(path)
        k = stream.table("KERNEL")
        kernels += k.rows
        api = stream.table("API")
        w = stream.table("WINDOW")
        alias = stream.table("API_ALIAS")
        launched_at = (
            dict(zip(api["correlation_id"], api["start"], strict=True)) if api.rows else {}
        )
        if alias.rows:
            for driver, runtime in zip(
                alias["driver_correlation_id"], alias["runtime_correlation_id"], strict=True
            ):
                if runtime in launched_at:
                    launched_at[driver] = launched_at[runtime]
        for start, end, reason in (
            zip(w["start"], w["end"], w["reason"], strict=True) if w.rows else ()
        ):
            windows.append((start, end, reason))
            in_window.append(
                sum(
                    1
                    for c in (k["correlation_id"] if k.rows else ())
                    if start <= launched_at.get(c, -1) <= end
                )
            )
        c = stream.table("COUNTER")
        for name, value in zip(c["name"], c["value"], strict=True):
            if name.startswith("program_") or name == "records_program_only":
                counters[name] = counters.get(name, 0) + value
        counters["api_records"] = counters.get("api_records", 0) + api.rows
    return {"kernels": kernels, "windows": windows, "kernels_in_window": in_window, **counters}


def main() -> None:
    run_dir = Path(sys.argv[1])
    results: dict[str, dict] = {}
    for name in sys.argv[2:]:
        wl = workload(run_dir, name)
        if not wl:
            results[name] = {"error": "no workload line (see its stderr)"}
            continue
        to_mono = wl["clocks"][0] - wl["clocks"][1]
        ms = wl["ms"]
        active = [ms[i] for i in wl["active"]]
        r: dict = {
            "active_ms": statistics.median(active) if active else None,
            "plain_ms": statistics.median(ms[PLAIN_FROM:]),
            "traces": [kineto(Path(p), to_mono) for p in wl["traces"]],
        }
        kept = run_dir / f"{name}.streams"
        if kept.is_dir():
            ours = streams(kept)
            r["ours"] = ours
            r["windows"] = []
            for (start, end, reason), launched, trace in zip(
                ours["windows"], ours["kernels_in_window"], r["traces"], strict=False
            ):
                steps = trace["steps"]
                r["windows"].append(
                    {
                        "reason": reason,
                        "open_after_first_active_step_ms": (start - steps[0][0]) / 1e6,
                        "close_after_last_active_step_ms": (end - steps[-1][1]) / 1e6,
                        "our_kernels_launched_in_it": launched,
                        "kineto_kernels": trace["kernels"],
                    }
                )
            ours["windows"] = len(ours["windows"])
        for t in r["traces"]:
            t["steps"] = len(t["steps"])
        results[name] = r
    (run_dir / "results.json").write_text(json.dumps(results, indent=1))
    print(f"{'run':<14}{'active ms':>10}{'plain ms':>10}  kineto kernels per trace  ours")
    for name, r in results.items():
        if "error" in r:
            print(f"{name:<14}{r['error']}")
            continue
        kk = [t["kernels"] for t in r["traces"]]
        ours = r.get("ours", {}).get("kernels", "-")
        active = f"{r['active_ms']:.3f}" if r["active_ms"] is not None else "-"
        print(f"{name:<14}{active:>10}{r['plain_ms']:>10.3f}  {kk!s:<25} {ours}")
    print(
        json.dumps(
            {k: {kk: v for kk, v in r.items() if kk != "traces"} for k, r in results.items()}
        )
    )


if __name__ == "__main__":
    main()
