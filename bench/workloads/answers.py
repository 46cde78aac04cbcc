"""Small programs with one known cause of GPU idle each, for checking that `report` names the
cause and the line (bench/answers_gpu.sh runs them under `record`, bench/answers_report.py
checks the findings).  The line of each cause carries a `# CAUSE:<mode>` comment; none of the
loops is marked (no ProfilerStep, no NVTX): steps must be detected.

    python3 -m bench.workloads.answers MODE [--steps N]

Modes: sync (loss.item() every step), dataloader (a Python-decoding Dataset on the main
thread), preprocess (Python work between steps), pageable (128 MB pageable H2D copy per
step), launch_bound (tiny elementwise kernels), fp32_gemm (FP32 matmuls, no TF32), gpu_bound
(bf16 matmuls, the control: no idle finding).  Issue 37's indirect causes: loader_workers
(2 DataLoader workers whose __getitem__ is slower than the step), infer_preprocess (a Python
tokenizer between inference requests, the result read with .cpu()), sync_then_prep (a
logging .item() then CPU preparation of the next batch), producer_thread (the loop takes
batches from a queue a thread fills too slowly), file_reads (a file read in the loop),
nvtx_steps (NVTX-marked iterations after an unmarked warm-up), cuda_graph (a captured
step replayed, Python between replays)."""

from __future__ import annotations

import argparse
import math
import time

import torch
from torch import nn

MODES = (
    "sync",
    "dataloader",
    "preprocess",
    "pageable",
    "launch_bound",
    "fp32_gemm",
    "gpu_bound",
    # issue 37: indirect causes
    "loader_workers",
    "infer_preprocess",
    "sync_then_prep",
    "producer_thread",
    "file_reads",
    "nvtx_steps",
    "cuda_graph",
)


def mlp(
    width: int = 1024, depth: int = 4, dtype: torch.dtype = torch.float32
) -> tuple[nn.Module, torch.optim.Optimizer]:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers).to("cuda", dtype)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


def log_metrics(step: int, value: float) -> str:
    """Formats a log line the way training scripts do, a few ms of host work."""
    line = ""
    for k in range(2000):
        line = f"step {step} loss {value:.6f} k {k}"
    return line


def run_sync(steps: int) -> None:
    # bf16 GEMMs of ~0.5 ms: the GPU work of a step outlasts its launches, so only the
    # sync keeps the GPU waiting (for the logging that follows it).
    model, opt = mlp(width=4096, dtype=torch.bfloat16)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    for step in range(steps):
        loss = train_step(model, opt, x)
        value = loss.item()  # CAUSE:sync
        log_metrics(step, value)


class SlowDecode(torch.utils.data.Dataset):
    """Decodes each sample in Python: the input pipeline the GPU waits for."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> torch.Tensor:  # CAUSE:dataloader
        values = [math.sin(index * 0.001 + k) for k in range(6000)]
        return torch.tensor(values[:1024])


def run_dataloader(steps: int) -> None:
    model, opt = mlp()
    loader = torch.utils.data.DataLoader(SlowDecode(), batch_size=16, num_workers=0)
    for i, batch in enumerate(loader):
        if i == steps:
            break
        train_step(model, opt, batch.cuda(non_blocking=True))


def augment_schedule(step: int) -> float:  # CAUSE:preprocess
    total = 0.0
    for k in range(40000):
        total += math.cos(step * 1e-3 + k * 1e-4)
    return total


def run_preprocess(steps: int) -> None:
    model, opt = mlp()
    x = torch.randn(512, 1024, device="cuda")
    for step in range(steps):
        scale = augment_schedule(step)
        train_step(model, opt, x * (1.0 + scale * 1e-9))


def run_pageable(steps: int) -> None:
    model, opt = mlp()
    host = torch.randn(32 << 20)  # 128 MB of pageable memory
    for _ in range(steps):
        x = host.to("cuda")  # CAUSE:pageable
        train_step(model, opt, x[: 512 * 1024].view(512, 1024))


def run_launch_bound(steps: int) -> None:
    # A small MLP (8 x Linear(512)+LayerNorm+GELU, batch 64) with AdamW: ~100 kernels of a
    # few us per step, launched slower than they run.
    layers: list[nn.Module] = []
    for _ in range(8):
        layers += [nn.Linear(512, 512), nn.LayerNorm(512), nn.GELU()]
    model = nn.Sequential(*layers).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(64, 512, device="cuda")
    for _ in range(steps):
        loss = model(x).square().mean()  # CAUSE:launch_bound
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def run_fp32_gemm(steps: int) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")
    for _ in range(steps):
        c = a @ b  # CAUSE:fp32_gemm
        a = c * 1e-3


def run_gpu_bound(steps: int) -> None:
    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(steps):
        c = a @ b
        a = (c * 1e-4).relu()


class SlowWorkerDecode(SlowDecode):
    """Slower than the step even with 2 workers."""

    def __getitem__(self, index: int) -> torch.Tensor:  # CAUSE:loader_workers
        values = [math.sin(index * 0.001 + k) for k in range(30000)]
        return torch.tensor(values[:1024])


def run_loader_workers(steps: int) -> None:
    model, opt = mlp()
    loader = torch.utils.data.DataLoader(SlowWorkerDecode(), batch_size=16, num_workers=2)
    for i, batch in enumerate(loader):
        if i == steps:
            break
        train_step(model, opt, batch.cuda(non_blocking=True))


def tokenize(text: str) -> list[int]:  # CAUSE:infer_preprocess
    ids = []
    for _ in range(20):
        ids = [hash(w) % 50000 for w in text.split()]
    return ids


def run_infer_preprocess(steps: int) -> None:
    model, _ = mlp(width=2048, dtype=torch.bfloat16)
    text = " ".join(f"word{k}" for k in range(4000))
    with torch.no_grad():
        for _ in range(steps):
            ids = tokenize(text)
            x = torch.tensor(ids[:2048], dtype=torch.bfloat16).cuda().expand(256, 2048)
            out = model(x).cpu()  # the result the caller needs
            del out


def prepare_batch(step: int) -> torch.Tensor:  # CAUSE:sync_then_prep
    rows = [[math.cos(step + k * j) for k in range(64)] for j in range(300)]
    return torch.tensor(rows).flatten()[:1024]


def run_sync_then_prep(steps: int) -> None:
    model, opt = mlp(width=4096, dtype=torch.bfloat16)
    x = torch.randn(8192, 4096, device="cuda", dtype=torch.bfloat16)
    for step in range(steps):
        loss = train_step(model, opt, x)
        print(f"loss {loss.item():.4f}", end="\r")
        x[0, :1024] = prepare_batch(step).to("cuda", torch.bfloat16)


def run_producer_thread(steps: int) -> None:
    import queue
    import threading

    batches: queue.Queue[torch.Tensor] = queue.Queue(maxsize=2)

    def produce() -> None:
        for step in range(steps):
            total = 0.0
            for k in range(60000):
                total += math.sin(step + k)
            batches.put(torch.full((512, 1024), total * 1e-6))

    threading.Thread(target=produce, name="producer", daemon=True).start()
    model, opt = mlp()
    for _ in range(steps):
        batch = batches.get()  # CAUSE:producer_thread
        train_step(model, opt, batch.cuda())


def run_file_reads(steps: int) -> None:
    import os
    import tempfile

    path = os.path.join(tempfile.mkdtemp(), "shard.bin")
    with open(path, "wb") as f:
        f.write(os.urandom(64 << 20))
    model, opt = mlp()
    for _ in range(steps):
        with open(path, "rb") as f:
            data = f.read()  # CAUSE:file_reads
        x = torch.frombuffer(bytearray(data[: 512 * 1024 * 4]), dtype=torch.float32)
        train_step(model, opt, x.view(512, 1024).cuda())


def run_nvtx_steps(steps: int) -> None:
    model, opt = mlp()
    x = torch.randn(512, 1024, device="cuda")
    for _ in range(3):  # warm-up, outside the ranges
        train_step(model, opt, x)
    for step in range(steps):
        torch.cuda.nvtx.range_push("train_step")
        scale = augment_schedule(step)
        train_step(model, opt, x * (1.0 + scale * 1e-9))
        torch.cuda.nvtx.range_pop()


def run_cuda_graph(steps: int) -> None:
    model, opt = mlp()
    x = torch.randn(512, 1024, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step(model, opt, x)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        loss = model(x).square().mean()
        loss.backward()
    for step in range(steps):
        graph.replay()
        augment_schedule(step)


STEPS = {
    "sync": 150,
    "dataloader": 60,
    "preprocess": 100,
    "pageable": 60,
    "launch_bound": 300,
    "fp32_gemm": 100,
    "gpu_bound": 200,
    "loader_workers": 40,
    "infer_preprocess": 60,
    "sync_then_prep": 100,
    "producer_thread": 60,
    "file_reads": 40,
    "nvtx_steps": 25,
    "cuda_graph": 50,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--steps", type=int)
    args = parser.parse_args()
    steps = args.steps or STEPS[args.mode]
    torch.cuda.init()
    t0 = time.perf_counter()
    globals()[f"run_{args.mode}"](steps)
    torch.cuda.synchronize()
    print(f"answers {args.mode}: {steps} steps in {time.perf_counter() - t0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
