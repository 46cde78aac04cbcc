"""GPU ops that belong to no capture window of their process.

With a window mode on, CUPTI makes records only while a window has its kinds on, except
where the program's own profiler (torch.profiler's Kineto, served from our CUPTI session:
cupti_inject/src/program_profiler.c) keeps a kind on outside our windows: those records
reach our buffers too.  An op launched inside a window has its API call recorded (the API
callbacks are on in windows); one with no API call that also starts outside every window
was launched outside them, and is not ours to keep."""

from __future__ import annotations

import numpy as np

from collector.sources.cupti_flows import api_rows_of
from collector.sources.cupti_rows import GpuRows
from collector.sources.cupti_stream import Stream


def outside_windows(stream: Stream, gpu: GpuRows) -> np.ndarray:
    """A mask over the GPU rows: no API call, and a start in no window of the process
    (all false when the process recorded no window)."""
    windows = stream.table("WINDOW")
    if not windows.rows or not gpu.rows:
        return np.zeros(gpu.rows, bool)
    start = gpu.column("ts")
    in_window = np.zeros(gpu.rows, bool)
    for lo, hi in zip(windows["start"], windows["end"], strict=True):
        in_window |= (start >= lo) & (start <= hi)
    no_api = api_rows_of(stream, gpu.column("correlation_id")) < 0
    return no_api & ~in_window
