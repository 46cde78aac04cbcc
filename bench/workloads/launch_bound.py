"""Launch-bound training step: many tiny kernels, CPU dispatch dominates.

8 x [Linear(512, 512), LayerNorm, GELU] on a batch of 64, MSE loss, AdamW;
forward + backward + optimizer step is about 100 kernels in about 3 ms on an H100,
the shape where per-launch profiler overhead shows most.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.profiler import record_function

from .cli import main
from .timing import Step, median_step_ms

WIDTH = 512
DEPTH = 8
BATCH = 64


def make_step(device: str = "cuda") -> Step:
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(DEPTH):
        layers += [nn.Linear(WIDTH, WIDTH), nn.LayerNorm(WIDTH), nn.GELU()]
    model = nn.Sequential(*layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    inputs = torch.randn(BATCH, WIDTH, device=device)
    target = torch.randn(BATCH, WIDTH, device=device)

    def step() -> None:
        # Named ranges give the traces user_annotation / gpu_user_annotation events.
        with record_function("forward"):
            loss = nn.functional.mse_loss(model(inputs), target)
        with record_function("backward"):
            loss.backward()
        with record_function("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return step


def run(steps: int = 50, warmup: int = 10) -> float:
    return median_step_ms(make_step(), steps, warmup)


if __name__ == "__main__":
    main("launch_bound", run)
