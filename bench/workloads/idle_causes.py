"""Small programs with one known cause of GPU idle each, direct (a sync, a pageable copy,
tiny kernels) or indirect (issue 37: the launching thread blocked or busy with something the
GPU waits on, not with the line it last ran), for checking that `report` names the cause and
the line.  The line of each cause (the line a user would change) carries a
`# CAUSE:<mode>` comment; no loop is marked as steps (no ProfilerStep, no NVTX) unless the
mode is about steps: steps must be detected.

    python3 -m bench.workloads.idle_causes MODE [--steps N] [--kineto JSON]
    python3 bench/workloads/idle_causes.py --help     # the modes, without torch

Two suites run them: bench/answers_gpu.sh (checked by bench/answers_report.py) and
bench/indirect_gpu.sh (with Kineto JSON for HolisticTraceAnalysis; bench/indirect_report.py).
The indirect suite's modes were indirect.py's; the four whose names the answers suite
already used are renamed (docs/benchmarks.md): infer_preprocess -> infer_vocab,
producer_thread -> producer_lists, file_reads -> jsonl_reads, nvtx_steps -> nvtx_sync_steps.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import sys
import tempfile
import threading
import time

try:
    import torch
    from torch import nn
except ImportError:  # the mode list (--help) needs no torch; running a mode does
    torch = None

# Each mode: what its program does (and its cause).
MODES = {
    "sync": "loss.item() every step, then logging (bf16 GEMMs)",
    "dataloader": "a Python-decoding Dataset on the main thread (num_workers=0)",
    "preprocess": "Python work between steps",
    "pageable": "a 128 MB pageable host-to-device copy per step",
    "launch_bound": "tiny kernels (8 x Linear(512)+LayerNorm+GELU, AdamW, batch 64)",
    "fp32_gemm": "FP32 matmuls, TF32 off",
    "gpu_bound": "bf16 matmuls, the control: no idle finding",
    "loader_workers": "2 DataLoader workers whose __getitem__ is slower than the step",
    "infer_preprocess": "a hashing tokenizer between inference requests, result read by .cpu()",
    "sync_then_prep": "a logging .item(), then CPU preparation of the next batch",
    "producer_thread": "the loop takes tensors from a queue a thread fills too slowly",
    "file_reads": "a 64 MB binary file read in the loop",
    "nvtx_steps": "NVTX-marked steps of Python preprocessing, after an unmarked warm-up",
    "cuda_graph": "a captured step replayed, Python between replays",
    "slow_workers": "DataLoader(num_workers=2), Python __getitem__ slower than the step",
    "infer_vocab": "a vocabulary tokenizer per request, then the needed .cpu() of the scores",
    "sync_then_cpu": "loss.item() for logging, then ~1.5 ms of Python building the next inputs",
    "producer_lists": "a thread builds Python lists into a queue slower than the GPU steps",
    "jsonl_reads": "each step reads and parses a JSON-lines file",
    "nvtx_sync_steps": "25 NVTX-ranged steps whose idle is a logging sync, after a warm-up",
}
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
    "slow_workers": 60,
    "infer_vocab": 150,
    "sync_then_cpu": 150,
    "producer_lists": 80,
    "jsonl_reads": 80,
    "nvtx_sync_steps": 25,
}


def mlp(
    width: int = 1024, depth: int = 4, dtype: torch.dtype | None = None
) -> tuple[nn.Module, torch.optim.Optimizer]:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers).to("cuda", dtype or torch.float32)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def train_step(
    model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, loss_in_fp32: bool = False
) -> torch.Tensor:
    out = model(x)
    loss = (out.float() if loss_in_fp32 else out).square().mean()
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


class SlowDecode:
    """Decodes each sample in Python: the input pipeline the GPU waits for."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> torch.Tensor:  # CAUSE:dataloader
        values = [math.sin(index * 0.001 + k) for k in range(6000)]
        return torch.tensor(values[:1024])


def train_from_loader(
    model: nn.Module,
    opt: torch.optim.Optimizer,
    loader: torch.utils.data.DataLoader,
    steps: int,
    loss_in_fp32: bool = False,
) -> None:
    """A step per batch the loader gives, `steps` of them."""
    for i, batch in enumerate(loader):
        if i == steps:
            break
        train_step(model, opt, batch.cuda(non_blocking=True), loss_in_fp32)


def run_dataloader(steps: int) -> None:
    model, opt = mlp()
    loader = torch.utils.data.DataLoader(SlowDecode(), batch_size=16, num_workers=0)
    train_from_loader(model, opt, loader, steps)


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
    train_from_loader(model, opt, loader, steps)


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


# ---- issue 37's indirect suite (bench/indirect_gpu.sh) ----


class SlowSamples:
    """Each sample computed in Python (a decode, an augmentation): ~1 ms a sample."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> torch.Tensor:  # CAUSE:slow_workers
        values = [math.sin(index * 0.001 + k) for k in range(12000)]
        return torch.tensor(values[:2048], dtype=torch.bfloat16)


def run_slow_workers(steps: int) -> None:
    model, opt = mlp(2048, dtype=torch.bfloat16)
    loader = torch.utils.data.DataLoader(SlowSamples(), batch_size=32, num_workers=2)
    train_from_loader(model, opt, loader, steps, loss_in_fp32=True)


VOCAB = {f"w{i}": i for i in range(30000)}


def tokenize_vocab(text: str) -> list[int]:  # CAUSE:infer_vocab
    ids = []
    for word in text.split():
        piece = word.lower().strip(".,")
        ids.append(VOCAB.get(piece, len(piece)) % 2048)
    return ids


def run_infer_vocab(steps: int) -> None:
    model, _ = mlp(2048, dtype=torch.bfloat16)
    model.eval()
    text = " ".join(f"W{i % 40000}." for i in range(6000))
    with torch.no_grad():
        for _ in range(steps):
            ids = tokenize_vocab(text)
            x = torch.tensor(ids[:2048], dtype=torch.bfloat16, device="cuda").expand(256, 2048)
            scores = model(x).float().softmax(-1).cpu()  # the caller needs the result
            int(scores[0].argmax())


def next_inputs(step: int) -> list[float]:  # CAUSE:sync_then_cpu
    return [math.cos(step * 1e-3 + k * 1e-4) for k in range(15000)]


def run_sync_then_cpu(steps: int) -> None:
    model, opt = mlp(2048, dtype=torch.bfloat16)
    x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    for step in range(steps):
        loss = train_step(model, opt, x, loss_in_fp32=True)
        print(f"step {step} loss {loss.item():.4f}", flush=False)  # the logging sync
        scale = sum(next_inputs(step)) * 1e-9
        x = x * (1.0 + scale)


def produce_lists(q: queue.Queue[list[float] | None], steps: int) -> None:
    for step in range(steps):
        batch = [math.sin(step + k * 1e-3) for k in range(60000)]  # CAUSE:producer_lists
        q.put(batch)
    q.put(None)


def run_producer_lists(steps: int) -> None:
    model, opt = mlp(2048, dtype=torch.bfloat16)
    q: queue.Queue[list[float] | None] = queue.Queue(maxsize=2)
    threading.Thread(target=produce_lists, args=(q, steps), name="producer", daemon=True).start()
    while (batch := q.get()) is not None:
        x = torch.tensor(batch[:2048], dtype=torch.bfloat16).cuda().expand(4096, 2048)
        train_step(model, opt, x, loss_in_fp32=True)


def run_jsonl_reads(steps: int) -> None:
    model, opt = mlp(2048, dtype=torch.bfloat16)
    folder = tempfile.mkdtemp(prefix="indirect-")
    paths = []
    for i in range(8):
        path = os.path.join(folder, f"shard{i}.jsonl")
        with open(path, "w") as f:
            for r in range(3000):
                f.write(json.dumps({"id": r, "x": [math.sin(r + k) for k in range(8)]}) + "\n")
        paths.append(path)
    for step in range(steps):
        with open(paths[step % len(paths)]) as f:
            rows = [json.loads(line) for line in f]  # CAUSE:jsonl_reads
        x = torch.tensor([r["x"] for r in rows[:256]], dtype=torch.bfloat16).cuda()
        train_step(model, opt, x.repeat(16, 256), loss_in_fp32=True)


def run_nvtx_sync_steps(steps: int) -> None:
    model, opt = mlp(2048, dtype=torch.bfloat16)
    x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # warm-up, outside the ranges
        train_step(model, opt, x, loss_in_fp32=True)
    torch.cuda.synchronize()
    for step in range(steps):
        torch.cuda.nvtx.range_push("train_step")
        loss = train_step(model, opt, x, loss_in_fp32=True)
        value = loss.item()  # CAUSE:nvtx_sync_steps
        lines = [f"step {step} loss {value:.6f} k {k}" for k in range(3000)]
        del lines
        torch.cuda.nvtx.range_pop()


def main() -> int:
    parser = argparse.ArgumentParser(
        prog="python3 -m bench.workloads.idle_causes",
        description="Run one program with a known cause of GPU idle.",
        epilog="modes:\n" + "\n".join(f"  {m:<17} {what}" for m, what in MODES.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("mode", choices=MODES, metavar="MODE", help="one of the modes below")
    parser.add_argument("--steps", type=int, help="loop iterations (default: the mode's own)")
    parser.add_argument("--kineto", help="run under torch.profiler, its JSON written here")
    args = parser.parse_args()
    if torch is None:
        print(
            "idle_causes: torch is not installed in this Python; run it where it is",
            file=sys.stderr,
        )
        return 2
    steps = args.steps or STEPS[args.mode]
    run = globals()[f"run_{args.mode}"]
    torch.cuda.init()
    t0 = time.perf_counter()
    if args.kineto:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=activities) as prof:
            run(steps)
            torch.cuda.synchronize()
        prof.export_chrome_trace(args.kineto)
    else:
        run(steps)
    torch.cuda.synchronize()
    print(f"idle_causes {args.mode}: {steps} steps in {time.perf_counter() - t0:.2f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
