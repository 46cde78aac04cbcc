"""GPU workloads shared by the benchmarks and the trace generators.

Each module builds a step function with `make_step()` and times it with
`run(steps, warmup) -> median ms/step`; `python3 -m bench.workloads.<name> --steps N
--warmup M` prints that number.  Only torch is needed.
"""

from __future__ import annotations

WORKLOAD_NAMES = ("launch_bound", "compute_bound", "multi_stream", "cuda_graph")
