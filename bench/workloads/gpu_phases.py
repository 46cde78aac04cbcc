"""Three phases a GPU counter source must tell apart, each an NVTX range on the main
thread (the trace's marker slices) and its own kernels:

- `idle`: CUDA initialised, nothing launched (SM active ~0);
- `gemm`: bf16 8192^3 matmuls back to back (tensor pipes busy, DRAM quiet);
- `vector_add`: c = a + b over 2^28 fp32 elements (3 GiB moved per add: DRAM-bound, no
  tensor work).

Prints each phase's achieved rate (TFLOP/s, GB/s) as the device measured it (CUDA events).
"""

from __future__ import annotations

import argparse
import time

import torch

GEMM_N = 8192
VECTOR_N = 1 << 28


def timed(name: str, seconds: float, body: object) -> tuple[int, float]:
    """Run `body` until `seconds` pass; returns (iterations, GPU seconds)."""
    torch.cuda.nvtx.range_push(name)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    deadline = time.perf_counter() + seconds
    iterations = 0
    while time.perf_counter() < deadline:
        for _ in range(10):
            body()  # type: ignore[operator]
        iterations += 10
        torch.cuda.synchronize()
    end.record()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()
    return iterations, start.elapsed_time(end) / 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0, help="per phase")
    parser.add_argument("--idle-seconds", type=float, help="the idle phase (default --seconds)")
    parser.add_argument("--gemm-seconds", type=float, help="the GEMM phase (default --seconds)")
    parser.add_argument("--vector-seconds", type=float, help="the vector add (default --seconds)")
    args = parser.parse_args()
    idle, gemm, vector = (
        args.seconds if v is None else v
        for v in (args.idle_seconds, args.gemm_seconds, args.vector_seconds)
    )
    torch.cuda.init()
    a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(VECTOR_N, device="cuda")
    y = torch.randn(VECTOR_N, device="cuda")
    out = torch.empty(VECTOR_N, device="cuda")
    c = a @ b  # warm up the kernels before the phases
    torch.add(x, y, out=out)
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("idle")
    time.sleep(idle)
    torch.cuda.nvtx.range_pop()
    n, s = timed("gemm", gemm, lambda: torch.matmul(a, b, out=c))
    print(f"gemm: {n} x bf16 {GEMM_N}^3 in {s:.2f} s: {2 * GEMM_N**3 * n / s / 1e12:.0f} TFLOP/s")
    n, s = timed("vector_add", vector, lambda: torch.add(x, y, out=out))
    print(f"vector_add: {n} x 2^28 fp32 in {s:.2f} s: {3 * 4 * VECTOR_N * n / s / 1e9:.0f} GB/s")


if __name__ == "__main__":
    main()
