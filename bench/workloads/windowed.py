"""A long launch-bound run with a profiling window: `torch.cuda.profiler.start()` before step
FIRST and `stop()` after step FIRST + WINDOW - 1 (what `record --capture-range
cudaProfilerApi` keys on), or torch.profiler's `schedule` over the same steps.

    python3 -m bench.workloads.windowed --steps 3000 --first 1000 --window 50 \
        [--mode cuda_profiler|never|torch_profiler]

Prints the whole run's wall time per step (the cost a window adds to a long run) and the
median step time.  `never`: the same run whose window is never opened.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from .launch_bound import make_step


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--first", type=int, default=1000)
    ap.add_argument("--window", type=int, default=50)
    ap.add_argument(
        "--mode", choices=("cuda_profiler", "never", "torch_profiler"), default="cuda_profiler"
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
    t0 = time.perf_counter()
    for i in range(args.steps):
        if args.mode == "cuda_profiler" and i == args.first:
            torch.cuda.profiler.start()
        s = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - s) * 1e3)
        if args.mode == "cuda_profiler" and i == args.first + args.window - 1:
            torch.cuda.profiler.stop()
        if prof is not None:
            prof.step()
    total = time.perf_counter() - t0
    if prof is not None:
        prof.stop()
    print(
        f"windowed {args.mode}: {1e3 * total / args.steps:.4f} ms/run-step, "
        f"median {statistics.median(times):.3f} ms/step"
    )


if __name__ == "__main__":
    main()
