"""Compute-bound step: one 4096 x 4096 x 4096 fp32 matrix product (a single cuBLAS kernel).

The opposite of launch_bound: a few long kernels, so profiler overhead per step is tiny.
"""

from __future__ import annotations

import torch

from .cli import main
from .timing import Step, median_step_ms

SIZE = 4096


def make_step(device: str = "cuda") -> Step:
    torch.manual_seed(0)
    lhs = torch.randn(SIZE, SIZE, device=device)
    rhs = torch.randn(SIZE, SIZE, device=device)
    product = torch.empty(SIZE, SIZE, device=device)

    def step() -> None:
        torch.matmul(lhs, rhs, out=product)

    return step


def run(steps: int = 20, warmup: int = 5) -> float:
    return median_step_ms(make_step(), steps, warmup)


if __name__ == "__main__":
    main("compute_bound", run, default_steps=20)
