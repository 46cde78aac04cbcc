"""eBPF uprobe launch stacks vs the injection library's in-process unwinder, on a GPU.

    python3 bench/launch_stacks.py run --out DIR [--rounds 3]     # on the GPU machine, as root
    python3 bench/launch_stacks.py analyze DIR [--json OUT]       # anywhere: reads the traces

`run` records the launch-bound MLP step (bench/workloads/launch_bound.py) with everything on
(`xpu-perf record`: CPU sampling at 99 Hz, GPU activity, API calls, flows) once per
`--launch-stacks` mode, and runs it without the profiler; modes are interleaved round by
round and the workload's own median step time is kept for each run.  The last round's traces
are kept, plus one eBPF run with Python's perf map on (PYTHONPERFSUPPORT=1, Python 3.12+).
`analyze` reads those traces through trace_processor and measures the stacks on the launch
API slices: share with an application frame, depth, and the overhead per mode.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

STEPS, WARMUP = 300, 30
MODES = ("baseline", "inprocess", "ebpf", "off")
WORKLOAD_FILE = "launch_bound.py"
_STEP_RE = re.compile(r"launch_bound: ([0-9.]+) ms/step")

# The launch stacks recorded at launch API slices, with their frames and modules leaf first
# (views from exporters/perfetto/engine/xpu_views.sql).
LAUNCH_STACKS_SQL = """
with launch_samples as (
  select ls.id from xpu_launch_stack ls
  join thread_track tt on tt.utid = ls.utid
  join slice s on s.track_id = tt.id and s.ts = ls.ts
  where s.category = 'cuda_api'
    and (s.name glob 'cudaLaunchKernel*' or s.name glob 'cuLaunchKernel*'
         or s.name glob 'cudaGraphLaunch*' or s.name glob 'cuGraphLaunch*')
)
select sample_id, count(*) as depth,
       group_concat(name, char(31)) as frames, group_concat(module, char(31)) as modules
from (
  select f.sample_id, f.up, f.name, coalesce(f.module, '') as module
  from xpu_launch_stack_frame f join launch_samples l on l.id = f.sample_id
  order by f.sample_id, f.up
)
group by sample_id
"""
CUDA_MODULES = ("libcuda.", "libcupti", "libcudart", "libxpu_perf_cupti")


def _record_cmd(trace: Path, mode: str) -> list[str]:
    workload = ["-m", "bench.workloads.launch_bound", "--steps", str(STEPS)]
    workload += ["--warmup", str(WARMUP)]
    if mode == "baseline":
        return [sys.executable, *workload]
    return [
        sys.executable,
        "-m",
        "collector.commands.record",
        "--launch-stacks",
        mode,
        "-o",
        str(trace),
        "--",
        sys.executable,
        *workload,
    ]


def run(out: Path, rounds: int) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    results: dict = {"steps": STEPS, "warmup": WARMUP, "rounds": rounds, "runs": []}
    plan = [(r, m, {}) for r in range(rounds) for m in MODES]
    plan.append((rounds - 1, "ebpf_perfmap", {"PYTHONPERFSUPPORT": "1"}))
    for r, mode, extra_env in plan:
        keep = r == rounds - 1 and mode != "baseline"
        trace = out / f"{mode}.perfetto-trace" if keep else out / "scratch.perfetto-trace"
        record_mode = "ebpf" if mode == "ebpf_perfmap" else mode
        env = dict(os.environ, **extra_env)
        start = time.monotonic()
        proc = subprocess.run(
            _record_cmd(trace, record_mode), capture_output=True, text=True, cwd=REPO, env=env
        )
        wall = time.monotonic() - start
        match = _STEP_RE.search(proc.stdout)
        entry = {
            "round": r,
            "mode": mode,
            "rc": proc.returncode,
            "ms_per_step": float(match.group(1)) if match else None,
            "wall_s": round(wall, 1),
            "summary": [ln for ln in proc.stderr.splitlines() if ln.startswith("xpu-perf")],
        }
        if proc.returncode != 0 or match is None:
            entry["stderr_tail"] = proc.stderr[-3000:]
        results["runs"].append(entry)
        print(json.dumps(entry), flush=True)
        (out / "runs.json").write_text(json.dumps(results, indent=1))
    (out / "scratch.perfetto-trace").unlink(missing_ok=True)
    return results


def _stack_facts(trace: Path) -> dict:
    from exporters.perfetto.engine.trace_processor import open_trace
    from exporters.perfetto.engine.views import load_views

    with open_trace(trace) as t:
        load_views(t)
        rows = t.query(LAUNCH_STACKS_SQL)
        launches = t.scalar(
            "select a.int_value from slice s join args a using (arg_set_id) "
            "where s.category = 'xpu_perf_metadata' and a.key = 'debug.cupti_launches'"
        )
        cpu_samples = t.scalar("select count(*) from xpu_cpu_sample")
        errors = t.scalar(
            "select count(*) from stats where severity in ('error','data_loss') and value > 0"
        )
    depths = [r["depth"] for r in rows]
    outside_cuda = workload_frame = 0
    for r in rows:
        modules = r["modules"].split("\x1f")
        frames = r["frames"].split("\x1f")
        outside_cuda += any(m and not any(c in m for c in CUDA_MODULES) for m in modules)
        workload_frame += any(WORKLOAD_FILE in f or "launch_bound" in f for f in frames)
    n = launches or 0
    return {
        "launches": n,
        "launches_with_stack": len(rows),
        "pct_with_stack": round(100 * len(rows) / n, 2) if n else 0.0,
        "pct_with_frame_outside_cuda_libs": round(100 * outside_cuda / n, 2) if n else 0.0,
        "pct_with_workload_python_frame": round(100 * workload_frame / n, 2) if n else 0.0,
        "median_depth": statistics.median(depths) if depths else 0,
        "p10_depth": statistics.quantiles(depths, n=10)[0] if len(depths) > 1 else 0,
        "p90_depth": statistics.quantiles(depths, n=10)[-1] if len(depths) > 1 else 0,
        "cpu_samples": cpu_samples,
        "stats_errors": errors,
        "example_stack": rows[len(rows) // 2]["frames"].split("\x1f") if rows else [],
    }


def analyze(directory: Path) -> dict:
    runs = json.loads((directory / "runs.json").read_text())
    ms: dict[str, list[float]] = {}
    for entry in runs["runs"]:
        if entry["ms_per_step"] is not None and entry["mode"] in MODES:
            ms.setdefault(entry["mode"], []).append(entry["ms_per_step"])
    medians = {m: statistics.median(v) for m, v in ms.items()}
    base = medians.get("baseline")
    table: dict[str, dict] = {}
    for mode in (*MODES[1:], "ebpf_perfmap"):
        trace = directory / f"{mode}.perfetto-trace"
        facts = _stack_facts(trace) if trace.exists() else {"missing": True}
        if mode in medians and base:
            facts["median_ms_per_step"] = medians[mode]
            facts["overhead_pct"] = round(100 * (medians[mode] / base - 1), 1)
        table[mode] = facts
    result = {"baseline_ms_per_step": base, "samples_ms": ms, "modes": table, "runs": runs}
    header = ("mode", "ms/step", "overhead", "stack %", "app frame %", "py frame %", "depth")
    print("  ".join(f"{h:>12s}" for h in header))
    for mode, f in table.items():
        cells = (
            mode,
            f"{f.get('median_ms_per_step', float('nan')):.3f}",
            f"{f.get('overhead_pct', float('nan')):+.1f}%",
            f"{f.get('pct_with_stack', 0):.1f}",
            f"{f.get('pct_with_frame_outside_cuda_libs', 0):.1f}",
            f"{f.get('pct_with_workload_python_frame', 0):.1f}",
            f"{f.get('median_depth', 0)}",
        )
        print("  ".join(f"{c:>12s}" for c in cells))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--rounds", type=int, default=3)
    a = sub.add_parser("analyze")
    a.add_argument("dir", type=Path)
    a.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    if args.cmd == "run":
        run(args.out, args.rounds)
        return 0
    result = analyze(args.dir)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
