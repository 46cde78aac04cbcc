"""A data-parallel training loop for the multi-rank benchmarks: one rank of a torchrun job
(NCCL backend), an MLP under DistributedDataParallel, each step in an NVTX range `step`
(so `report --ranks --steps step` finds the steps), gradients all-reduced by NCCL.

    torchrun --nnodes=2 --nproc-per-node=1 --node-rank=K ... -m bench.workloads.ddp_steps

`--slow-by gpu` must make the slow rank's GPU work, not the launches, set its step time, or
the bigger share changes nothing the other rank waits for.  A step of a 4-layer width-W
MLP on B rows is 4 x (2BW^2 forward + 4BW^2 backward) = 24BW^2 FLOP; its launch path is
about 40 kernels (4 layers forward and backward, the loss, DDP's bucket copies, SGD's
foreach updates), ~5 us each on the host: ~0.2 ms.  At the old 256 / 512 rows, W = 2048,
fp32: 24 x 256 x 2048^2 = 26 GFLOP, ~0.4 ms at the H200's ~60 TFLOPS fp32, under 1 ms
for either rank with the launches and the all-reduce: both ranks' steps were near the
launch floor plus the 67 MB fp32 gradient all-reduce, so the extra rows barely showed.
With `--slow-by gpu` the defaults are 8192 rows (16384 on the slow rank) in bf16
(`--width 4096` in bench/indirect_gpu.sh): 24 x 8192 x 4096^2 = 3.3 TFLOP, ~5 ms at a
realistic ~650 of the 989 TFLOPS dense bf16, ~10 ms on the slow rank, against ~0.2 ms of
launches and ~0.5 ms for the 134 MB bf16 all-reduce over NVLink: the slow rank arrives at
each collective ~5 ms after the other, as the host variant's ~4 ms.  Memory: 67M
parameters (134 MB bf16, as much again for gradients) and six activations of 16384 x 4096
bf16 (134 MB each): under 2 GB.
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
    ap.add_argument(
        "--rows",
        type=int,
        default=None,
        help="batch rows per rank (the slow rank's doubled with --slow-by gpu); "
        "default 256, with --slow-by gpu 8192 (GPU-bound: see the module's docstring)",
    )
    ap.add_argument(
        "--dtype",
        choices=("float32", "bfloat16"),
        default=None,
        help="default float32, with --slow-by gpu bfloat16",
    )
    args = ap.parse_args()
    gpu_share = args.slow_by == "gpu"
    base_rows = args.rows or (8192 if gpu_share else 256)
    dtype = getattr(torch, args.dtype or ("bfloat16" if gpu_share else "float32"))
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    layers = [torch.nn.Linear(args.width, args.width) for _ in range(4)]
    mlp = torch.nn.Sequential(*layers).to(device="cuda", dtype=dtype)
    model = DistributedDataParallel(mlp, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    slow = rank == args.slow_rank
    rows = 2 * base_rows if slow and gpu_share else base_rows
    x = torch.randn(rows, args.width, device="cuda", dtype=dtype)
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
    print(
        f"ddp_steps rank {rank}: {ms:.3f} ms/step over {args.steps} steps "
        f"({rows} rows, width {args.width}, {dtype})",
        flush=True,
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
