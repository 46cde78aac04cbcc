"""A training loop that runs its own torch.profiler with a schedule, as many scripts do
(Lightning's profiler="pytorch", HF Trainer callbacks): the launch-bound step of
launch_bound.py, `schedule(wait=5, warmup=3, active=10, repeat=2)` over the first 36 steps,
then plain steps.  Each trace the profiler finishes is written as Kineto JSON.

    python3 -m bench.workloads.profiled_steps --steps 300 --trace-prefix /tmp/k \
        [--no-profiler]

Prints one JSON line `profiled_steps: {...}`: every step's time in ms (each bracketed by
device synchronisation), which steps were active in the profiler's schedule, the traces
written, and a (CLOCK_REALTIME, CLOCK_MONOTONIC) pair in ns read together, which puts the
Kineto traces' wall-clock times on the monotonic clock of xpu-perf's streams.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from .launch_bound import make_step

WAIT, WARMUP, ACTIVE, REPEAT = 5, 3, 10, 2
CYCLE = WAIT + WARMUP + ACTIVE


def active_step(i: int) -> bool:
    """Is step i (0-based, the profiler stepped after each) one of the schedule's active?"""
    return i < CYCLE * REPEAT and i % CYCLE >= WAIT + WARMUP


def main() -> None:
    parser = argparse.ArgumentParser(prog="python3 -m bench.workloads.profiled_steps")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--trace-prefix", default="/tmp/profiled_steps")
    parser.add_argument("--no-profiler", action="store_true")
    args = parser.parse_args()
    step = make_step()
    for _ in range(10):  # warm: cuBLAS handles, allocator, the first launches
        step()
    torch.cuda.synchronize()
    traces: list[str] = []

    def on_trace_ready(prof: profile) -> None:
        path = f"{args.trace_prefix}.{len(traces)}.json"
        prof.export_chrome_trace(path)
        traces.append(path)

    profiler = (
        contextlib.nullcontext()
        if args.no_profiler
        else profile(
            activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
            schedule=schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=REPEAT),
            on_trace_ready=on_trace_ready,
        )
    )
    clocks = (time.time_ns(), time.monotonic_ns())
    ms: list[float] = []
    with profiler as prof:
        for _ in range(args.steps):
            torch.cuda.synchronize()
            start = time.perf_counter()
            step()
            torch.cuda.synchronize()
            ms.append((time.perf_counter() - start) * 1e3)
            if prof is not None:
                prof.step()
    active = [i for i in range(args.steps) if active_step(i) and not args.no_profiler]
    print(
        "profiled_steps: "
        + json.dumps({"ms": ms, "active": active, "traces": traces, "clocks": clocks}),
        flush=True,
    )


if __name__ == "__main__":
    main()
