"""Per-step wall-clock timing of a GPU step, bracketed by device synchronisation."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

Step = Callable[[], None]


def median_step_ms(step: Step, steps: int, warmup: int) -> float:
    """Median milliseconds per step.

    Every step is bracketed by `torch.cuda.synchronize()` so that a step's time covers
    its GPU work and not just the asynchronous launches of it.
    """
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    samples: list[float] = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)
