"""Two GPUs: a small model step on each, a peer copy between them, a sync on both.

Per step: a matmul + GELU on cuda:0 and on cuda:1 (each on its device's default stream),
then the cuda:0 result is copied to cuda:1 (a peer-to-peer copy when the GPUs can reach
each other, else staged through the host by the driver) and added there.  Exercises
per-device tracks, device ids on every op, and CUPTI's peer-to-peer memcpy records.
"""

from __future__ import annotations

import torch

from .cli import main
from .timing import Step, median_step_ms

SIDE = 1024


def make_step() -> Step:
    if torch.cuda.device_count() < 2:
        raise SystemExit("multi_gpu needs two GPUs")
    torch.manual_seed(0)
    a0 = torch.randn(SIDE, SIDE, device="cuda:0")
    w0 = torch.randn(SIDE, SIDE, device="cuda:0")
    a1 = torch.randn(SIDE, SIDE, device="cuda:1")
    w1 = torch.randn(SIDE, SIDE, device="cuda:1")
    landing = torch.empty(SIDE, SIDE, device="cuda:1")

    def step() -> None:
        y0 = torch.nn.functional.gelu(a0 @ w0)
        y1 = torch.nn.functional.gelu(a1 @ w1)
        landing.copy_(y0, non_blocking=True)  # cuda:0 -> cuda:1
        y1.add_(landing)
        torch.cuda.synchronize("cuda:0")
        torch.cuda.synchronize("cuda:1")

    return step


def run(steps: int = 50, warmup: int = 10) -> float:
    return median_step_ms(make_step(), steps, warmup)


if __name__ == "__main__":
    main("multi_gpu", run)
