"""Programs whose GPU work runs beside worker processes that end through _exit (issue 21's
checks on the GPU machine, bench/fork_children_gpu.sh and bench/faults_views_gpu.sh):

    python3 -m bench.workloads.worker_processes compile   # torch.compile's compile workers
    python3 -m bench.workloads.worker_processes loader    # a DataLoader with 4 workers

and their layouts without a GPU (tests/test_names.py, where torch is there):

    python3 -m bench.workloads.worker_processes loader-cpu  # a DataLoader with 3 workers
    python3 -m bench.workloads.worker_processes pool-cpu    # inductor's compile-worker pool
"""

from __future__ import annotations

import sys


def run_compile() -> None:
    import torch

    @torch.compile
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ x).sum()

    x = torch.randn(2048, 2048, device="cuda")
    for _ in range(30):
        f(x)
    torch.cuda.synchronize()


def run_loader() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    dl = DataLoader(TensorDataset(torch.randn(8192, 512)), batch_size=64, num_workers=4)
    m = torch.nn.Linear(512, 512).cuda()
    for _ in range(2):
        for (b,) in dl:
            m(b.cuda(non_blocking=True)).sum().backward()
    torch.cuda.synchronize()


def run_loader_cpu() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    dl = DataLoader(TensorDataset(torch.randn(4096, 256)), batch_size=64, num_workers=3)
    m = torch.nn.Linear(256, 256)
    for (b,) in dl:
        m(b).sum().backward()


def run_pool_cpu() -> None:
    """inductor's compile-worker pool started as torch.compile starts it (AsyncCompile: on
    CPU-only machines a small compile finishes before it is used), given CPU work."""
    import functools
    import math

    from torch._inductor.async_compile import AsyncCompile

    pool = AsyncCompile.process_pool()
    futures = [pool.submit(functools.partial(math.factorial, 30_000 + i)) for i in range(16)]
    for future in futures:
        future.result()


if __name__ == "__main__":
    {
        "compile": run_compile,
        "loader": run_loader,
        "loader-cpu": run_loader_cpu,
        "pool-cpu": run_pool_cpu,
    }[sys.argv[1]]()
