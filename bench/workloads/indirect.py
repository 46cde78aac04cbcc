"""Small programs whose GPU idle has an indirect cause (issue 37): the launching thread is
blocked or busy with something the GPU waits on, not with the line it last ran.  Each
program's cause is marked `# CAUSE:<mode>` on the line a user would change; the loops are
not marked as steps unless the mode is about steps.  bench/indirect_gpu.sh records them,
bench/indirect_report.py reads what `report` says.

    python3 -m bench.workloads.indirect MODE [--steps N]

Modes:
- slow_workers: DataLoader(num_workers=2) whose Python `__getitem__` takes longer per batch
  than the GPU step: the main thread waits for a batch (blocked, not sampled).
- infer_preprocess: per request a Python tokenizer, a forward pass, then `.cpu()` of the
  result the caller needs: the idle is the tokenizer, not the copy.
- sync_then_cpu: `loss.item()` for logging, then ~1.5 ms of Python that builds the next
  batch's inputs while the GPU sits empty.
- producer_thread: a thread builds batches in Python into a queue.Queue more slowly than the
  GPU consumes them; the main thread blocks in `get()`.
- file_reads: each step reads and parses a file (JSON lines) in the loop.
- nvtx_steps: 25 steps inside NVTX ranges named `train_step`, a warm-up outside them; the
  step's own idle is a logging sync.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import queue
import tempfile
import threading
import time

import torch
from torch import nn

MODES = (
    "slow_workers",
    "infer_preprocess",
    "sync_then_cpu",
    "producer_thread",
    "file_reads",
    "nvtx_steps",
)
STEPS = {
    "slow_workers": 60,
    "infer_preprocess": 150,
    "sync_then_cpu": 150,
    "producer_thread": 80,
    "file_reads": 80,
    "nvtx_steps": 25,
}


def mlp(width: int = 2048, depth: int = 4) -> tuple[nn.Module, torch.optim.Optimizer]:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    model = nn.Sequential(*layers).to("cuda", torch.bfloat16)
    return model, torch.optim.SGD(model.parameters(), lr=1e-3)


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor) -> torch.Tensor:
    loss = model(x).float().square().mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss


class SlowSamples(torch.utils.data.Dataset):
    """Each sample computed in Python (a decode, an augmentation): ~1 ms a sample."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> torch.Tensor:  # CAUSE:slow_workers
        values = [math.sin(index * 0.001 + k) for k in range(12000)]
        return torch.tensor(values[:2048], dtype=torch.bfloat16)


def run_slow_workers(steps: int) -> None:
    model, opt = mlp()
    loader = torch.utils.data.DataLoader(SlowSamples(), batch_size=32, num_workers=2)
    for i, batch in enumerate(loader):
        if i == steps:
            break
        train_step(model, opt, batch.cuda(non_blocking=True))


VOCAB = {f"w{i}": i for i in range(30000)}


def tokenize(text: str) -> list[int]:  # CAUSE:infer_preprocess
    ids = []
    for word in text.split():
        piece = word.lower().strip(".,")
        ids.append(VOCAB.get(piece, len(piece)) % 2048)
    return ids


def run_infer_preprocess(steps: int) -> None:
    model, _ = mlp()
    model.eval()
    text = " ".join(f"W{i % 40000}." for i in range(6000))
    with torch.no_grad():
        for _ in range(steps):
            ids = tokenize(text)
            x = torch.tensor(ids[:2048], dtype=torch.bfloat16, device="cuda").expand(256, 2048)
            scores = model(x).float().softmax(-1).cpu()  # the caller needs the result
            int(scores[0].argmax())


def next_inputs(step: int) -> list[float]:  # CAUSE:sync_then_cpu
    return [math.cos(step * 1e-3 + k * 1e-4) for k in range(15000)]


def run_sync_then_cpu(steps: int) -> None:
    model, opt = mlp()
    x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    for step in range(steps):
        loss = train_step(model, opt, x)
        print(f"step {step} loss {loss.item():.4f}", flush=False)  # the logging sync
        scale = sum(next_inputs(step)) * 1e-9
        x = x * (1.0 + scale)


def produce(q: queue.Queue[list[float] | None], steps: int) -> None:
    for step in range(steps):
        batch = [math.sin(step + k * 1e-3) for k in range(60000)]  # CAUSE:producer_thread
        q.put(batch)
    q.put(None)


def run_producer_thread(steps: int) -> None:
    model, opt = mlp()
    q: queue.Queue[list[float] | None] = queue.Queue(maxsize=2)
    threading.Thread(target=produce, args=(q, steps), name="producer", daemon=True).start()
    while (batch := q.get()) is not None:
        x = torch.tensor(batch[:2048], dtype=torch.bfloat16).cuda().expand(4096, 2048)
        train_step(model, opt, x)


def run_file_reads(steps: int) -> None:
    model, opt = mlp()
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
            rows = [json.loads(line) for line in f]  # CAUSE:file_reads
        x = torch.tensor([r["x"] for r in rows[:256]], dtype=torch.bfloat16).cuda()
        train_step(model, opt, x.repeat(16, 256))


def run_nvtx_steps(steps: int) -> None:
    model, opt = mlp()
    x = torch.randn(4096, 2048, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):  # warm-up, outside the ranges
        train_step(model, opt, x)
    torch.cuda.synchronize()
    for step in range(steps):
        torch.cuda.nvtx.range_push("train_step")
        loss = train_step(model, opt, x)
        value = loss.item()  # CAUSE:nvtx_steps
        lines = [f"step {step} loss {value:.6f} k {k}" for k in range(3000)]
        del lines
        torch.cuda.nvtx.range_pop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--kineto", help="run under torch.profiler, its JSON written here")
    args = parser.parse_args()
    steps = args.steps or STEPS[args.mode]
    torch.cuda.init()
    t0 = time.perf_counter()
    if args.kineto:
        from torch.profiler import ProfilerActivity, profile

        activities = [ProfilerActivity.CPU, ProfilerActivity.CUDA]
        with profile(activities=activities) as prof:
            globals()[f"run_{args.mode}"](steps)
            torch.cuda.synchronize()
        prof.export_chrome_trace(args.kineto)
    else:
        globals()[f"run_{args.mode}"](steps)
    torch.cuda.synchronize()
    print(f"indirect {args.mode}: {steps} steps in {time.perf_counter() - t0:.2f} s", flush=True)


if __name__ == "__main__":
    main()
