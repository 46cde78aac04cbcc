"""`xpu_kernel_overlap`: per device, the time compute kernels overlap NCCL kernels, copies
and sets: the sum over (compute island, other island) pairs of their common time, over the
busy islands inside the analysed regions (busy.py).  The islands of one device and kind
never overlap each other, so each other island's common time with the compute islands is
what the compute islands cover inside it: a lookup in the device's sorted compute islands.
(Not a pairwise range join, nor trace_processor's interval intersect over the islands as
tables: both cost far more.  tests/test_kernel_overlap.py holds it to the pairwise
definition.)"""

from __future__ import annotations

import numpy as np

from collector.arrays import unique_with_inverse
from exporters.analysis.busy import KINDS, NO_DEVICE, covered, gpu_busy
from exporters.perfetto.engine.trace_processor import Trace, table_sql

OTHER = ("nccl", "memcpy", "memset")
COLUMNS = ("device_track_id", "kind", "overlap_ns")


def create(trace: Trace) -> None:
    found = gpu_busy(trace).analysed
    n = len(KINDS)
    device, kind = found.group // n, found.group % n
    compute = KINDS.index("compute")
    rows = []
    for other in OTHER:
        mine = kind == KINDS.index(other)
        # each other island against its device's compute islands
        ns = covered(found, device[mine] * n + compute, found.ts[mine], found.end_ts[mine])
        per_device, at = unique_with_inverse(device[mine])
        sums = np.zeros(per_device.size, dtype=np.int64)
        np.add.at(sums, at, ns)
        # ops under no device track are no device's (SQL's NULL = NULL matched nothing)
        rows += [
            (d, other, s)
            for d, s in zip(per_device.tolist(), sums.tolist(), strict=True)
            if s > 0 and d != NO_DEVICE
        ]
    rows.sort()
    trace.execute(table_sql("xpu_kernel_overlap", COLUMNS, rows))
