"""A data-parallel training loop for the multi-rank benchmarks: one rank of a torchrun job
(NCCL backend), an MLP under DistributedDataParallel, each step in an NVTX range `step`
(so `report --ranks --steps step` finds the steps), gradients all-reduced by NCCL.

    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=K ... -m bench.workloads.ddp_steps
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel


def host_work() -> float:
    """~4 ms of Python on the straggling rank (a metric, a check, a data-dependent branch)."""
    total = 0.0
    for k in range(60000):
        total += (k % 7) * 1e-3
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--slow-rank", type=int, default=-1, help="the rank that straggles")
    ap.add_argument(
        "--slow-by",
        choices=("host", "gpu"),
        default="host",
        help="host: ~4 ms of Python per step before the backward; gpu: a 2x bigger batch",
    )
    args = ap.parse_args()
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    layers = [torch.nn.Linear(args.width, args.width) for _ in range(4)]
    model = DistributedDataParallel(torch.nn.Sequential(*layers).cuda(), device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    slow = rank == args.slow_rank
    rows = 512 if slow and args.slow_by == "gpu" else 256
    x = torch.randn(rows, args.width, device="cuda")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(args.steps):
        torch.cuda.nvtx.range_push("step")
        opt.zero_grad(set_to_none=True)
        loss = model(x).square().mean()
        if slow and args.slow_by == "host":
            host_work()  # CAUSE:straggler_host
        loss.backward()  # DDP all-reduces the gradients (NCCL)
        opt.step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    ms = (time.perf_counter() - t0) * 1e3 / args.steps
    print(f"ddp_steps rank {rank}: {ms:.3f} ms/step over {args.steps} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
