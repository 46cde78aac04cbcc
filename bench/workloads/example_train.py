"""The program behind the README's bundled recording (bench/data/example_recorded.perfetto-trace):
a small image classifier trained on images that a Dataset decodes and augments in Python.

Its known problem is the most common real one: the GPU step takes a few milliseconds, but each
batch takes the two DataLoader workers longer to make, so the main thread spends most of every
step blocked waiting for the next batch and the GPU sits idle.  A CPU-time sampler sees only
the workers; the fix is in `Augment.__call__` / `Images.__getitem__` (vectorise it with torch,
move it to the GPU, or give the loader more workers).

    python3 -m bench.workloads.example_train [--steps 40] [--workers 2]
"""

from __future__ import annotations

import argparse
import math
import random
import time

import torch
from torch import nn

SIDE = 64


class Augment:
    """A per-pixel brightness/contrast jitter written as a Python loop, as ported code often is."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def __call__(self, pixels: list[float]) -> list[float]:
        gain = 0.8 + 0.4 * self.rng.random()
        bias = 0.1 * self.rng.random()
        return [min(1.0, max(0.0, p * gain + bias)) for p in pixels]


class Images(torch.utils.data.Dataset):
    """Synthetic 3x64x64 images, "decoded" from a seed, then augmented."""

    def __init__(self, count: int) -> None:
        self.count = count

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        pixels = [0.5 + 0.5 * math.sin(index * 0.37 + k * 0.011) for k in range(3 * SIDE * SIDE)]
        pixels = Augment(index)(pixels)
        image = torch.tensor(pixels, dtype=torch.float32).view(3, SIDE, SIDE)
        return image, index % 10


def classifier() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 64, 3, padding=1),
        nn.ReLU(),
        nn.Conv2d(64, 128, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.Conv2d(128, 256, 3, padding=1, stride=2),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(256, 10),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args()
    model = classifier().cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(
        Images(args.steps * args.batch), batch_size=args.batch, num_workers=args.workers
    )
    t0 = time.perf_counter()
    for step, (images, labels) in enumerate(loader):
        images = images.cuda(non_blocking=True)
        labels = labels.cuda(non_blocking=True)
        loss = nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.3f}", flush=True)
    torch.cuda.synchronize()
    print(f"{args.steps} steps in {time.perf_counter() - t0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
