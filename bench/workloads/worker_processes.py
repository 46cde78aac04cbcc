"""Programs whose GPU work runs beside worker processes that end through _exit (issue 21's
checks on the GPU machine, bench/fork_children_gpu.sh and bench/faults_views_gpu.sh):

    python3 -m bench.workloads.worker_processes compile   # torch.compile's compile workers
    python3 -m bench.workloads.worker_processes loader    # a DataLoader with 4 workers
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


if __name__ == "__main__":
    {"compile": run_compile, "loader": run_loader}[sys.argv[1]]()
