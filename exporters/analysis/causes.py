"""The causes of GPU idle time: one row each, read by everything that names them (the
report's idle table, the findings, `folded --mode idle`, `--annotate`, `report --ranks`),
so they cannot disagree.  How a gap is split into them: gaps.sql."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Cause:
    key: str  # xpu_gpu_gap.class, the annotated trace's idle slice name
    column: str  # its ns column in xpu_gpu_gap
    label: str  # what the report calls it
    finding: str  # the finding code that claims its time ('' for none)
    annotate: str  # its name in words on `--annotate`'s and view's GPU idle tracks


CAUSES = (
    Cause("sync", "sync_ns", "inside a host sync / blocking copy", "HOST_SYNC", "host sync"),
    Cause(
        "data_loading",
        "data_ns",
        "input pipeline (loading or waiting for data)",
        "INPUT_PIPELINE",
        "data loading",
    ),
    Cause(
        "host_compute",
        "host_ns",
        "other CPU work before the launch",
        "PYTHON_BETWEEN_LAUNCHES",
        "CPU work before the launch",
    ),
    Cause(
        "wait",
        "wait_ns",
        "launching thread blocked (lock, queue, sleep, I/O)",
        "BLOCKED_WAIT",
        "blocked",
    ),
    Cause(
        "launch",
        "launch_ns",
        "launching the GPU work (launch path and latency)",
        "LAUNCH_BOUND",
        "launch",
    ),
    Cause("other", "other_ns", "other (no launch call, nothing seen on the thread)", "", "other"),
)
BY_KEY = {c.key: c for c in CAUSES}
KEYS = tuple(c.key for c in CAUSES)
COLUMNS = {c.key: c.column for c in CAUSES}
