"""Three streams with copies, memsets, kernels and cross-stream waits.

Per step: the copy stream moves pinned and pageable host buffers to the device; the
compute stream memsets and fills scratch, waits on the copies' event, runs a few kernels
and a device-to-device copy; the default stream waits on the compute stream, runs a kernel,
and copies results back to pinned (async) and pageable (blocking) host memory.  This
exercises every memcpy kind, memsets and stream-wait events in one short step, inside an
NVTX range.
"""

from __future__ import annotations

import torch
from torch.profiler import record_function

from .cli import main
from .cudart import memset_async
from .timing import Step, median_step_ms

ELEMENTS = 1 << 20  # 4 MiB of fp32 per buffer
SIDE = 1024  # ELEMENTS viewed as SIDE x SIDE for the matmul


def make_step(device: str = "cuda") -> Step:
    torch.manual_seed(0)
    host_pinned_in = torch.randn(ELEMENTS).pin_memory()
    host_pageable_in = torch.randn(ELEMENTS)
    host_pinned_out = torch.empty(ELEMENTS, pin_memory=True)
    copied_pinned = torch.empty(ELEMENTS, device=device)
    copied_pageable = torch.empty(ELEMENTS, device=device)
    scratch = torch.empty(ELEMENTS, device=device)
    filled = torch.empty(ELEMENTS, device=device)
    scratch_copy = torch.empty(ELEMENTS, device=device)
    weight = torch.randn(SIDE, SIDE, device=device)

    copy_stream = torch.cuda.Stream()
    compute_stream = torch.cuda.Stream()
    default_stream = torch.cuda.current_stream()
    copies_done = torch.cuda.Event()
    compute_done = torch.cuda.Event()

    def step() -> None:
        # NVTX: a range around the step and a mark at its end (CUPTI MARKER records).
        torch.cuda.nvtx.range_push("multi_stream_step")
        with record_function("h2d"), torch.cuda.stream(copy_stream):
            copied_pinned.copy_(host_pinned_in, non_blocking=True)
            # Pageable source: the driver stages it, so this is host-synchronous.
            copied_pageable.copy_(host_pageable_in, non_blocking=True)
            copies_done.record(copy_stream)
        with record_function("compute"), torch.cuda.stream(compute_stream):
            memset_async(scratch, 0)
            filled.zero_()  # a fill kernel, for contrast with the memset above
            compute_stream.wait_event(copies_done)
            mixed = torch.relu(copied_pinned.view(SIDE, SIDE) @ weight)
            scratch.add_(mixed.view(-1)).mul_(copied_pageable).add_(filled)
            scratch_copy.copy_(scratch)  # device-to-device memcpy
            compute_done.record(compute_stream)
        with record_function("d2h"):
            default_stream.wait_event(compute_done)
            result = scratch_copy * 0.5
            host_pinned_out.copy_(result, non_blocking=True)
            result[:4096].cpu()  # pageable destination: blocks until the stream drains
        torch.cuda.nvtx.mark("multi_stream_step_end")
        torch.cuda.nvtx.range_pop()

    return step


def run(steps: int = 50, warmup: int = 10) -> float:
    return median_step_ms(make_step(), steps, warmup)


if __name__ == "__main__":
    main("multi_stream", run)
