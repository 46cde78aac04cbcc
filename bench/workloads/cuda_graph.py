"""A few kernels, a memset and a device-to-device copy captured once in a CUDA graph,
then replayed REPLAYS_PER_STEP times per step.

Graph replays launch all their work from one cudaGraphLaunch, so one API call maps to many
GPU ops: the case where launch-to-op flows are one-to-many.
"""

from __future__ import annotations

import torch
from torch.profiler import record_function

from .cli import main
from .cudart import memset_async
from .timing import Step, median_step_ms

ROWS = 256
WIDTH = 1024
REPLAYS_PER_STEP = 10


def make_step(device: str = "cuda", replays: int = REPLAYS_PER_STEP) -> Step:
    torch.manual_seed(0)
    static_input = torch.randn(ROWS, WIDTH, device=device)
    fresh_input = torch.randn(ROWS, WIDTH, device=device)
    weight = torch.randn(WIDTH, WIDTH, device=device)
    static_output = torch.empty(ROWS, WIDTH, device=device)
    snapshot = torch.empty(ROWS, WIDTH, device=device)

    def body() -> None:
        memset_async(snapshot, 0)
        hidden = torch.relu(static_input @ weight)
        hidden = hidden * 0.5 + 1.0
        static_output.copy_(torch.nn.functional.layer_norm(hidden, (WIDTH,)))
        snapshot.copy_(static_output)  # same dtype, contiguous: a cudaMemcpyAsync node

    # Capture needs the kernels (and cuBLAS workspace) warmed up on a side stream first.
    side_stream = torch.cuda.Stream()
    side_stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side_stream):
        for _ in range(3):
            body()
    torch.cuda.current_stream().wait_stream(side_stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        body()

    def step() -> None:
        static_input.copy_(fresh_input)
        with record_function("graph_replays"):
            for _ in range(replays):
                graph.replay()

    return step


def run(steps: int = 50, warmup: int = 10) -> float:
    return median_step_ms(make_step(), steps, warmup)


if __name__ == "__main__":
    main("cuda_graph", run)
