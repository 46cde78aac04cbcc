"""Text the command line's help shares between the top level and the commands."""

from __future__ import annotations

# What `report` finds, in words (exporters/analysis/findings.py has the rules; their codes
# are in `report --format json`).
FINDINGS_IN_WORDS = (
    "the GPU idle waiting on a host sync or blocking copy, on the input pipeline "
    "(DataLoader), on CPU work between launches, on a launching thread blocked in a lock, "
    "queue, sleep or I/O (the GIL named), on launches of small kernels; copies from "
    "pageable memory; FP32 matmuls that leave the tensor cores unused"
)
