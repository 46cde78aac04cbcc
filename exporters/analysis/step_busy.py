"""`xpu_step_busy`: per step, the time the busy islands of each kind of work cover inside
it on the step's devices (busy.py's islands inside the analysed regions), then the table
itself (step_busy.sql).  A lookup in each device's sorted islands, not a range join of
steps and islands in SQL."""

from __future__ import annotations

import numpy as np

from collector.arrays import unique_with_inverse
from exporters.analysis.busy import KINDS, covered, gpu_busy
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.trace_processor import ArrayTable, Trace

# A step of no device (its process launched nothing and the trace has no device) matches
# no island; busy.NO_DEVICE (-1) is the device of ops under no device track, which SQL's
# NULL = NULL never matched either.
_UNMATCHED = -2

COLUMNS = ("step", *(f"{'busy' if k == 'any' else k}_ns" for k in KINDS))


def create(trace: Trace) -> None:
    sql_modules.once(trace, "_xpu_step_kind_busy", kind_busy_table)
    sql_modules.load(trace, "analysis.step_busy")


def kind_busy_table(trace: Trace) -> None:
    """`_xpu_step_kind_busy`: per step and kind of work, the busy time inside it."""
    steps = trace.query_arrays(
        f"select step, ts, end_ts, coalesce(device, {_UNMATCHED}) as device from _xpu_step_device"
    )
    step = np.asarray(steps["step"], dtype=np.int64)
    ts = np.asarray(steps["ts"], dtype=np.int64)
    end_ts = np.asarray(steps["end_ts"], dtype=np.int64)
    device = np.asarray(steps["device"], dtype=np.int64)
    found = gpu_busy(trace).analysed
    numbers, row = unique_with_inverse(step)
    sums = np.zeros((len(KINDS), numbers.size), dtype=np.int64)
    for k in range(len(KINDS)):
        np.add.at(sums[k], row, covered(found, device * len(KINDS) + k, ts, end_ts))
    columns = dict(zip(COLUMNS, [numbers, *sums], strict=True))
    trace.create_table(ArrayTable("_xpu_step_kind_busy", columns))
