"""A long launch-bound run with a profiling window around steps FIRST .. FIRST + WINDOW - 1:
- cuda_profiler: `torch.cuda.profiler.start()` / `stop()` (`record --capture-range
  cudaProfilerApi`);
- nvtx: an NVTX range "window" pushed and popped around them (`--capture-range nvtx:window`);
- signal: SIGUSR2 to the parent (`record --capture-range signal` is the parent) before and
  after them: what a user's `kill -USR2` from another shell does, at known steps;
- torch_profiler: torch.profiler's `schedule` over the same steps.

    python3 -m bench.workloads.windowed --steps 3000 --first 1000 --window 50 \
        [--mode cuda_profiler|nvtx|signal|never|torch_profiler]

Prints the whole run's wall time per step (the cost a window adds to a long run) and the
median step time.  `never`: the same run whose window is never opened.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import time

import torch

from .launch_bound import make_step


def open_window(mode: str) -> float:
    """Opens the window; returns the seconds it waited (not part of the run's time)."""
    if mode == "cuda_profiler":
        torch.cuda.profiler.start()
    elif mode == "nvtx":
        torch.cuda.nvtx.range_push("window")
    elif mode == "signal":
        return toggle_parent()
    return 0.0


def close_window(mode: str) -> float:
    if mode == "cuda_profiler":
        torch.cuda.profiler.stop()
    elif mode == "nvtx":
        torch.cuda.nvtx.range_pop()
    elif mode == "signal":
        return toggle_parent()
    return 0.0


def toggle_parent() -> float:
    """Toggle the recording's window and wait for the libraries to follow (they poll every
    10 ms), so that the window holds exactly the steps between the two toggles."""
    os.kill(os.getppid(), signal.SIGUSR2)
    wait = 0.05
    time.sleep(wait)
    return wait


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--first", type=int, default=1000)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument(
        "--mode",
        choices=("cuda_profiler", "nvtx", "signal", "never", "torch_profiler"),
        default="cuda_profiler",
    )
    ap.add_argument("--trace", help="torch_profiler: write its trace here")
    args = ap.parse_args()
    step = make_step()
    for _ in range(20):
        step()
    torch.cuda.synchronize()
    prof = None
    if args.mode == "torch_profiler":
        prof = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA],
            schedule=torch.profiler.schedule(
                wait=args.first - 1, warmup=1, active=args.window, repeat=1
            ),
            on_trace_ready=(lambda p: p.export_chrome_trace(args.trace)) if args.trace else None,
        )
        prof.start()
    times: list[float] = []
    waited = 0.0
    t0 = time.perf_counter()
    for i in range(args.steps):
        if i == args.first:
            waited += open_window(args.mode)
        s = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - s) * 1e3)
        if i == args.first + args.window - 1:
            waited += close_window(args.mode)
        if prof is not None:
            prof.step()
    total = time.perf_counter() - t0 - waited
    if prof is not None:
        prof.stop()
    print(
        f"windowed {args.mode}: {1e3 * total / args.steps:.4f} ms/run-step, "
        f"median {statistics.median(times):.3f} ms/step"
    )


if __name__ == "__main__":
    main()
