"""A small GPT-2 (transformers, random weights: no hub on the GPU machine) trained for a few
steps, for checking what users see of a real model's stacks (bench/faults_views_gpu.sh)."""

from __future__ import annotations

import sys
import threading
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel


def metrics_loop(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(20000))
        time.sleep(0.001)


def train_step(model: GPT2LMHeadModel, opt: torch.optim.Optimizer, ids: torch.Tensor) -> None:
    loss = model(ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 40
    cfg = GPT2Config(n_layer=6, n_embd=512, n_head=8, vocab_size=8192, n_positions=256)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    stop = threading.Event()
    metrics = threading.Thread(target=metrics_loop, args=(stop,), name="metrics")
    metrics.start()
    for _ in range(steps):
        train_step(model, opt, ids)
    torch.cuda.synchronize()
    stop.set()
    metrics.join()
    print(f"gpt2: {steps} steps", flush=True)


if __name__ == "__main__":
    main()
