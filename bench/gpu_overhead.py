"""GPU overhead of xpu-perf's CUPTI injection, and the issue-3 correctness checks, on a GPU.

    python3 bench/gpu_overhead.py bench  --out DIR [--rounds 5] [--set core]  # overhead
    python3 bench/gpu_overhead.py verify --out DIR [--only NAME]  # record the workloads
    python3 bench/gpu_overhead.py check  DIR [--bench DIR/bench.json] [--json OUT]

`bench` runs each workload as a fresh process per mode, modes interleaved round by round so
drift hits every mode alike, and reports the median of the per-round medians of step time:
baseline, xpu-perf with everything on, xpu-perf knob variants (no stacks, no Python frames,
kernels only), torch.profiler with and without `with_stack`.
The xpu-perf modes load the injection library exactly as `record` does (the collector only
runs after the target exits, so it is not part of step time): the product library, or, for a
mode that sets a measurement-only switch (EXPERIMENT_SWITCHES: cupti_inject/src/experiments.h),
the experiments build of the same sources (`inject_build.build(experiments=True)`).  `--set`
picks the modes (MODE_SETS): core (the headline numbers), knobs, floor, kinds, stacks,
selftime (the library's own callback time by part, XPU_PERF_SELFTIME), dispatch (what CUPTI
itself costs), limit (CUPTI's floor and the headline in one machine start).  Switches whose
question is answered were removed with their modes (docs/benchmarks.md, "Removed switches").
`verify` runs `xpu-perf record --no-cpu` on the four workloads (bench/workloads/);
`--only multi_gpu` records the two-GPU workload on a machine with two GPUs.
`check` reads those traces back through trace_processor and asserts the issue's criteria.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WORKLOADS = {  # name -> (steps, warmup)
    "launch_bound": (300, 30),
    "compute_bound": (50, 10),
    "multi_stream": (50, 10),
    "cuda_graph": (50, 10),
}
# Verified when the machine has two GPUs (verify --only multi_gpu), not benchmarked.
MULTI_GPU = {"multi_gpu": (50, 10)}
XPU_MODES = {  # mode -> injection environment
    "xpu_perf": {},
    "xpu_no_stacks": {"XPU_PERF_STACKS": "0"},
    "xpu_no_python": {"XPU_PERF_PYTHON": "0"},
    "xpu_kernels_only": {"XPU_PERF_KINDS": "kernel"},
    # floors: CUPTI activity alone (no API callbacks), API callbacks alone (no activity)
    "cupti_activity_only": {"XPU_PERF_CALLBACKS": "0"},
    "xpu_callbacks_only": {"XPU_PERF_KINDS": "none"},
    "xpu_no_sync_records": {"XPU_PERF_KINDS": "kernel,memcpy,memset,marker"},
    "xpu_hw_trace": {"XPU_PERF_HW_TRACE": "1"},
    "xpu_sync_activity": {"XPU_PERF_SYNC_ACTIVITY": "1"},  # sync from CUPTI's records
    # the library's own callback time by part (printed at exit, kept in stream_stats)
    "xpu_selftime": {"XPU_PERF_SELFTIME": "1"},
    "xpu_selftime_no_python": {"XPU_PERF_SELFTIME": "1", "XPU_PERF_PYTHON": "0"},
    # CUPTI's callback dispatch with callbacks that return at once, no activity
    "cupti_callbacks_noop": {"XPU_PERF_KINDS": "none", "XPU_PERF_CALLBACK_NOOP": "1"},
    "xpu_callbacks_only_no_stacks": {"XPU_PERF_KINDS": "none", "XPU_PERF_STACKS": "0"},
    "cupti_kernels_callbacks_noop": {
        "XPU_PERF_PARSE": "0",
        "XPU_PERF_KINDS": "kernel",
        "XPU_PERF_CALLBACK_NOOP": "1",
    },
    # CUPTI buffer attribute: larger device buffers
    "xpu_device_buffer_64mb": {"XPU_PERF_DEVICE_BUFFER_MB": "64"},
    # where CUPTI's own cost ends: no periodic cuptiActivityFlushAll, buffers freed unread
    # (the last breaks the trace; measurement only)
    "xpu_no_periodic_flush": {"XPU_PERF_FLUSH_MS": "600000"},
    "cupti_activity_unparsed": {"XPU_PERF_CALLBACKS": "0", "XPU_PERF_PARSE": "0"},
    "cupti_kernels_unparsed": {
        "XPU_PERF_CALLBACKS": "0",
        "XPU_PERF_PARSE": "0",
        "XPU_PERF_KINDS": "kernel",
    },
}
# CUPTI alone (no callbacks, buffers unread) with kernels plus one more activity kind each.
for _kind in ("sync", "memcpy", "memset", "marker"):
    XPU_MODES[f"cupti_kernels_{_kind}_unparsed"] = {
        "XPU_PERF_CALLBACKS": "0",
        "XPU_PERF_PARSE": "0",
        "XPU_PERF_KINDS": f"kernel,{_kind}",
    }
TORCH_MODES = ("torch_profiler", "torch_profiler_stack")
# Read only by the experiments build of the injection library (cupti_inject/src/experiments.h):
# a mode that sets one runs on that build, every other xpu-perf mode on the product library.
EXPERIMENT_SWITCHES = frozenset(
    {
        "XPU_PERF_CALLBACKS",
        "XPU_PERF_PARSE",
        "XPU_PERF_CALLBACK_NOOP",
        "XPU_PERF_SELFTIME",
        "XPU_PERF_HW_TRACE",
    }
)


# The same product library built from an earlier revision (`bench --before-library PATH`):
# a refactoring of the library measured against what it replaced, in one run.
BEFORE_MODE = "xpu_perf_before"
XPU_MODES[BEFORE_MODE] = {}


def needs_experiments(mode: str) -> bool:
    return mode in XPU_MODES and not EXPERIMENT_SWITCHES.isdisjoint(XPU_MODES[mode])


MODE_SETS = {
    # the library against an earlier build of it (needs --before-library)
    "before": {
        "launch_bound": ("baseline", "xpu_perf", BEFORE_MODE),
        "compute_bound": ("baseline", "xpu_perf", BEFORE_MODE),
    },
    # the headline numbers: xpu-perf against the baseline and torch.profiler
    "core": {
        "launch_bound": (
            "baseline",
            "xpu_perf",
            "xpu_sync_activity",
            "xpu_no_stacks",
            *TORCH_MODES,
        ),
        "compute_bound": ("baseline", "xpu_perf"),
    },
    # what each knob costs
    "knobs": {
        "launch_bound": (
            "baseline",
            "xpu_perf",
            "xpu_no_python",
            "xpu_no_stacks",
            "xpu_kernels_only",
            "xpu_no_sync_records",
            "xpu_callbacks_only",
            "cupti_activity_only",
        )
    },
    # CUPTI's own floor against ours, launch-bound only
    "floor": {
        "launch_bound": (
            "baseline",
            "xpu_perf",
            "xpu_no_periodic_flush",
            "cupti_activity_unparsed",
            "cupti_kernels_unparsed",
            "xpu_callbacks_only",
            "torch_profiler",
        )
    },
    # launch-stack unwinders and knobs, launch-bound only
    "stacks": {
        "launch_bound": (
            "baseline",
            "xpu_perf",
            "xpu_no_python",
            "xpu_no_stacks",
            "xpu_callbacks_only",
        )
    },
    # where the library's own callback time goes
    "selftime": {
        "launch_bound": (
            "baseline",
            "xpu_perf",
            "xpu_selftime",
            "xpu_selftime_no_python",
            "xpu_no_stacks",
            "cupti_kernels_unparsed",
        )
    },
    # CUPTI's callback dispatch vs the library's own callback work, launch-bound only
    "dispatch": {
        "launch_bound": (
            "baseline",
            "cupti_callbacks_noop",
            "xpu_callbacks_only_no_stacks",
            "xpu_callbacks_only",
            "cupti_kernels_unparsed",
            "xpu_no_stacks",
            "xpu_perf",
        )
    },
    # the floor and the headline in one machine start: CUPTI kernel activity alone, plus
    # callbacks that return at once, xpu-perf without and with launch stacks
    "limit": {
        "launch_bound": (
            "baseline",
            "cupti_kernels_unparsed",
            "cupti_kernels_callbacks_noop",
            "xpu_no_stacks",
            "xpu_perf",
        )
    },
    # which activity kind costs what (CUPTI alone), launch-bound only
    "kinds": {
        "launch_bound": (
            "baseline",
            "cupti_kernels_unparsed",
            *(f"cupti_kernels_{k}_unparsed" for k in ("sync", "memcpy", "memset", "marker")),
        )
    },
}


def child(workload: str, steps: int, warmup: int, profiler: str) -> None:
    """Run one workload in this process; print its median step time as JSON."""
    import torch

    module = importlib.import_module(f"bench.workloads.{workload}")
    timing = importlib.import_module("bench.workloads.timing")
    step = module.make_step()
    if profiler == "none":
        ms = timing.median_step_ms(step, steps, warmup)
    else:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=activities, with_stack=profiler == "torch_profiler_stack"):
            ms = timing.median_step_ms(step, steps, warmup)
        torch.cuda.synchronize()
    print(json.dumps({"ms": ms}))


def run_mode(workload: str, mode: str, libraries: dict[bool | str, Path]) -> dict[str, float]:
    """One fresh process of `workload` under `mode`; libraries: product (False) and, where a
    mode of the set needs it, experiments (True) and the earlier build ("before")."""
    steps, warmup = WORKLOADS[workload]
    env = dict(os.environ)
    profiler = "none"
    streams = None
    if mode in XPU_MODES:
        streams = tempfile.mkdtemp(prefix="xpu-bench-")
        library = libraries["before"] if mode == BEFORE_MODE else libraries[needs_experiments(mode)]
        # What `record` sets (the GPU source's target environment).
        env.update(
            CUDA_INJECTION64_PATH=str(library),
            NVTX_INJECTION64_PATH=str(library),
            XPU_PERF_OUT_DIR=streams,
            **XPU_MODES[mode],
        )
    elif mode in TORCH_MODES:
        profiler = mode
    cmd = [sys.executable, __file__, "child", workload, str(steps), str(warmup), profiler]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{workload}/{mode} failed: {proc.stderr[-2000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    if mode in XPU_MODES:
        result["library"] = (
            "before"
            if mode == BEFORE_MODE
            else "experiments"
            if needs_experiments(mode)
            else "product"
        )
    selftime = [ln for ln in proc.stderr.splitlines() if ln.startswith("xpu-perf selftime")]
    if selftime:
        result["selftime"] = selftime
    if streams is not None:
        from collector.sources.cupti_stream import read_stream

        counters: dict[str, int] = {}
        for path in Path(streams).iterdir():
            s = read_stream(path)
            t = s.table("COUNTER")
            for name, value in zip(t["name"], t["value"], strict=True):
                counters[name] = counters.get(name, 0) + value
            result["stream_bytes"] = result.get("stream_bytes", 0) + path.stat().st_size
            path.unlink()
        os.rmdir(streams)
        result["dropped"] = counters.get("cupti_dropped_records", 0) + counters.get(
            "transport_dropped_rows", 0
        )
        result["kernels"] = counters.get("records_kernel", 0)
        result["records_other"] = counters.get("records_other", 0)  # e.g. API activity records
    return result


def bench(out: Path, rounds: int, mode_set: str, before: Path | None = None) -> dict:
    from collector.inject_build import build

    modes_of = MODE_SETS[mode_set]
    libraries: dict[bool | str, Path] = {False: build()}
    if any(BEFORE_MODE in ms for ms in modes_of.values()):
        if before is None or not before.is_file():
            raise SystemExit(f"--set {mode_set} needs --before-library PATH (a built library)")
        libraries["before"] = before
    if any(needs_experiments(m) for ms in modes_of.values() for m in ms):
        libraries[True] = build(experiments=True)
    samples: dict[str, dict[str, list[float]]] = {
        w: {m: [] for m in ms} for w, ms in modes_of.items()
    }
    extra: dict[str, dict] = {}
    for r in range(rounds):
        for workload, modes in modes_of.items():
            for mode in modes:
                res = run_mode(workload, mode, libraries)
                samples[workload][mode].append(res["ms"])
                extra.setdefault(f"{workload}.{mode}", {}).update(
                    {k: v for k, v in res.items() if k != "ms"}
                )
                print(f"round {r} {workload:13s} {mode:22s} {res['ms']:.3f} ms/step", flush=True)
        # Samples so far, so a run cut off by a time limit still leaves its completed rounds.
        out.mkdir(parents=True, exist_ok=True)
        partial = {"rounds_completed": r + 1, "samples_ms": samples, "stream_stats": extra}
        (out / f"bench_{mode_set}.partial.json").write_text(json.dumps(partial, indent=1))
    result: dict = {"rounds": rounds, "samples_ms": samples, "stream_stats": extra}
    for workload, modes in samples.items():
        med = {m: statistics.median(v) for m, v in modes.items()}
        base = med["baseline"]
        result[workload] = {
            "median_ms": med,
            **{
                f"{m}_overhead_pct": round(100 * (v / base - 1), 2)
                for m, v in med.items()
                if m != "baseline"
            },
        }
        if "xpu_perf" in med:  # mode sets without it (e.g. "kinds") have no headline number
            result[workload]["overhead_pct"] = result[workload]["xpu_perf_overhead_pct"]
        if "torch_profiler" in med:
            result[workload]["torch_profiler_overhead_pct"] = result[workload][
                "torch_profiler_overhead_pct"
            ]
    out.mkdir(parents=True, exist_ok=True)
    (out / f"bench_{mode_set}.json").write_text(json.dumps(result, indent=1))
    return result


# verify runs: trace name -> (workload, extra environment).  multi_stream is recorded a second
# time with sync ops from CUPTI's SYNCHRONIZATION records, to compare with the callbacks' ones.
VERIFY_RUNS = {
    **{w: (w, {}) for w in (*WORKLOADS, *MULTI_GPU)},
    "multi_stream_sync_activity": ("multi_stream", {"XPU_PERF_SYNC_ACTIVITY": "1"}),
}


def verify(out: Path, only: list[str] | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (workload, extra_env) in VERIFY_RUNS.items():
        if only is not None and name not in only:
            continue
        if only is None and workload in MULTI_GPU:
            continue  # needs a second GPU: run it by name
        steps, warmup = {**WORKLOADS, **MULTI_GPU}[workload]
        trace = out / f"{name}.perfetto-trace"
        cmd = [
            sys.executable,
            "-m",
            "collector.commands.record",
            "--no-cpu",
            "-o",
            str(trace),
            "--",
            sys.executable,
            "-m",
            f"bench.workloads.{workload}",
            "--steps",
            str(steps),
            "--warmup",
            str(warmup),
        ]
        env = dict(os.environ, **extra_env)
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=400)
        print(proc.stdout.strip())
        print(proc.stderr.strip()[-3000:])
        size = trace.stat().st_size if trace.exists() else 0
        print(f"verify {name}: rc={proc.returncode} trace={size} B", flush=True)


def _metadata(t, key: str) -> int:
    value = t.scalar(
        "select a.int_value from slice s join args a using (arg_set_id) "
        f"where s.category = 'xpu_perf_metadata' and a.key = 'debug.{key}'"
    )
    return int(value or 0)


def _counts(t, sql: str) -> dict[str, int]:
    """{key: n} from a query that selects `key` and `n`."""
    return {r["key"]: r["n"] for r in t.query(sql)}


def check(directory: Path) -> dict:
    """The issue's assertions on each recorded trace; returns the per-workload facts."""
    from exporters.perfetto.engine.trace_processor import open_trace

    facts: dict[str, dict] = {}
    for trace in sorted(directory.glob("*.perfetto-trace")):
        with open_trace(trace) as t:
            f: dict = {}
            f["kernels_in_trace"] = t.scalar("select count(*) from slice where category = 'kernel'")
            f["kernels_delivered"] = _metadata(t, "cupti_delivered_kernel")
            f["gpu_ops"] = t.scalar(
                "select count(*) from slice where category in ('kernel','memcpy','memset','sync')"
            )
            f["gpu_ops_with_flow"] = t.scalar(
                "select count(*) from slice g "
                "where g.category in ('kernel','memcpy','memset','sync') "
                "and exists (select 1 from flow f where f.slice_in = g.id)"
            )
            f["dropped"] = _metadata(t, "cupti_dropped_records") + _metadata(
                t, "cupti_transport_dropped_rows"
            )
            f["launches"] = _metadata(t, "cupti_launches")
            f["launches_with_user_frame"] = _metadata(t, "cupti_launches_with_user_frame")
            f["launches_without_stack"] = _metadata(t, "cupti_launches_without_stack")
            f["matched_via_alias"] = _metadata(t, "cupti_gpu_ops_matched_via_alias")
            f["graph_kernels"] = t.scalar(
                "select count(*) from slice g join args a on a.arg_set_id = g.arg_set_id "
                "and a.key = 'debug.graph_id' where g.category = 'kernel'"
            )
            f["graph_kernels_from_graph_launch"] = t.scalar(
                "select count(*) from slice g join args a on a.arg_set_id = g.arg_set_id "
                "and a.key = 'debug.graph_id' join flow f on f.slice_in = g.id "
                "join slice api on api.id = f.slice_out where g.category = 'kernel' "
                "and api.name like '%GraphLaunch%'"
            )
            # Clock alignment: a GPU op never starts before the API call that caused it.
            f["ops_before_their_api"] = t.scalar(
                "select count(*) from flow f join slice a on a.id = f.slice_out "
                "join slice g on g.id = f.slice_in where g.ts < a.ts"
            )
            f["python_frames"] = t.scalar(
                "select count(*) from stack_profile_frame where name like '%.py:%'"
            )
            f["nvtx_slices"] = t.scalar("select count(*) from slice where category = 'nvtx'")
            # Sync ops per (type name, track name): compared between the two multi_stream runs.
            f["syncs"] = _counts(
                t,
                "select s.name || '@' || t.name as key, count(*) n from slice s "
                "join track t on s.track_id = t.id where s.category = 'sync' group by 1",
            )
            # GPU ops per device track, and copies by kind (PtoP: between two GPUs).
            f["gpu_ops_by_device"] = _counts(
                t,
                "select p.name as key, count(*) n from slice s "
                "join track t on s.track_id = t.id join track p on t.parent_id = p.id "
                "where s.category in ('kernel','memcpy','memset','sync') group by 1",
            )
            f["memcpy_kinds"] = _counts(
                t,
                "select a.string_value as key, count(*) n from slice s "
                "join args a on a.arg_set_id = s.arg_set_id and a.key = 'debug.copy_kind' "
                "where s.category = 'memcpy' group by 1",
            )
            f["stats_errors"] = t.scalar(
                "select count(*) from stats where severity in ('error','data_loss') and value > 0"
            )
            f["trace_bytes"] = trace.stat().st_size
            f["bytes_per_kernel"] = round(f["trace_bytes"] / max(f["kernels_in_trace"], 1), 1)
            f["gpu_ops_with_flow_pct"] = round(
                100 * f["gpu_ops_with_flow"] / max(f["gpu_ops"], 1), 3
            )
            f["launches_with_stack_pct"] = round(
                100 * f["launches_with_user_frame"] / max(f["launches"], 1), 3
            )
            f["ok"] = bool(
                f["kernels_in_trace"] == f["kernels_delivered"]
                and f["dropped"] == 0
                and f["gpu_ops_with_flow"] == f["gpu_ops"]
                and f["launches_with_stack_pct"] >= 99
                and f["graph_kernels"] == f["graph_kernels_from_graph_launch"]
            )
            facts[trace.name.removesuffix(".perfetto-trace")] = f
            print(trace.name, json.dumps(f))
    if "multi_stream" in facts:
        # NVTX ranges arrive as CUPTI MARKER records (MARKER is enabled at the first NVTX call).
        steps, warmup = WORKLOADS["multi_stream"]
        facts["multi_stream"]["ok"] &= facts["multi_stream"]["nvtx_slices"] >= steps + warmup
    if "multi_stream" in facts and "multi_stream_sync_activity" in facts:
        ours, cuptis = facts["multi_stream"]["syncs"], facts["multi_stream_sync_activity"]["syncs"]
        same = ours == cuptis
        facts["multi_stream"]["syncs_match_cupti_sync_records"] = same
        facts["multi_stream"]["ok"] &= same
        print("sync ops from callbacks:", ours, "\nfrom CUPTI SYNCHRONIZATION:", cuptis)
    return facts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("child")
    c.add_argument("workload")
    c.add_argument("steps", type=int)
    c.add_argument("warmup", type=int)
    c.add_argument("profiler")
    b = sub.add_parser("bench")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--rounds", type=int, default=5)
    b.add_argument("--set", dest="mode_set", choices=sorted(MODE_SETS), default="core")
    b.add_argument(
        "--before-library",
        type=Path,
        help="--set before: the injection library built from an earlier revision",
    )
    v = sub.add_parser("verify")
    v.add_argument("--out", type=Path, required=True)
    v.add_argument(
        "--only", action="append", choices=sorted(VERIFY_RUNS), help="just these runs (repeatable)"
    )
    k = sub.add_parser("check")
    k.add_argument("dir", type=Path)
    k.add_argument("--bench", type=Path, help="bench.json to merge")
    k.add_argument("--json", type=Path, help="write the merged results here")
    args = parser.parse_args()
    if args.cmd == "child":
        child(args.workload, args.steps, args.warmup, args.profiler)
    elif args.cmd == "bench":
        bench(args.out, args.rounds, args.mode_set, args.before_library)
    elif args.cmd == "verify":
        verify(args.out, args.only)
    else:
        facts = check(args.dir)
        if args.json:
            merged = json.loads(args.bench.read_text()) if args.bench else {}
            merged["verify"] = facts
            merged["dropped_records"] = sum(f["dropped"] for f in facts.values())
            ops = sum(f["gpu_ops"] for f in facts.values())
            merged["gpu_ops_with_flow_pct"] = round(
                100 * sum(f["gpu_ops_with_flow"] for f in facts.values()) / max(ops, 1), 3
            )
            launches = sum(f["launches"] for f in facts.values())
            merged["launches_with_stack_pct"] = round(
                100 * sum(f["launches_with_user_frame"] for f in facts.values()) / max(launches, 1),
                3,
            )
            if "launch_bound" in facts:
                merged["bytes_per_kernel"] = facts["launch_bound"]["bytes_per_kernel"]
            args.json.write_text(json.dumps(merged, indent=1) + "\n")
        return 0 if all(f["ok"] for f in facts.values()) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
