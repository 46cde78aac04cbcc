"""Queue depth per stream (`xpu_stream_queue`): the ops launched onto a stream and not yet
finished, seen at each launch; per stream its maximum and its mean over the launches.

A running sum over every launch and every end, in numpy, over the ops busy.py reads out,
rather than a window function in the engine's SQL (row by row in SQLite in wasm).  The table
is made from the few rows it has (one per stream), for `query` and the report as before."""

from __future__ import annotations

import numpy as np

from collector.arrays import group_rows_by_keys
from exporters.analysis.busy import gpu_busy, track_names
from exporters.perfetto.engine.trace_processor import Trace, table_sql

COLUMNS = ("device_track_id", "device", "stream", "max_depth", "mean_depth_at_launch", "launches")


def depth_per_stream(
    stream: np.ndarray, launch_ts: np.ndarray, end_ts: np.ndarray
) -> list[tuple[int, int, float, int]]:
    """(stream, max depth, mean depth at launch, launches) per stream code in `stream`
    (int64, one per op), by code.  An op counts from its launch to its end; at one time
    ends come before launches, so an op that ends as the next is launched is not queued
    behind it."""
    if stream.size == 0:
        return []
    n = stream.size
    group = np.concatenate([stream, stream])
    ts = np.concatenate([launch_ts, end_ts])
    delta = np.concatenate([np.ones(n, np.int64), -np.ones(n, np.int64)])
    order = np.lexsort((delta, ts, group))
    group, delta = group[order], delta[order]
    depth = np.cumsum(delta)
    starts = np.flatnonzero(np.r_[True, group[1:] != group[:-1]])
    # each stream's sum starts from 0: take off what the streams before it left
    depth -= np.repeat(np.r_[0, depth[starts[1:] - 1]], np.diff(np.r_[starts, depth.size]))
    launch = delta > 0
    at_launch, launch_group = depth[launch], group[launch]
    firsts = np.flatnonzero(np.r_[True, launch_group[1:] != launch_group[:-1]])
    counts = np.diff(np.r_[firsts, at_launch.size])
    maxima = np.maximum.reduceat(at_launch, firsts)
    sums = np.add.reduceat(at_launch, firsts)
    return [
        (int(g), int(m), float(s) / int(c), int(c))
        for g, m, s, c in zip(launch_group[firsts], maxima, sums, counts, strict=True)
    ]


def create(trace: Trace) -> None:
    """`xpu_stream_queue` from the launched ops (`xpu_launch`: those with an API call), read
    out once for all the analyses (busy.py)."""
    ops = gpu_busy(trace).ops
    mine = np.flatnonzero(ops.launched)
    device, stream_code = ops.device[mine], ops.stream[mine]
    # One code per (device, stream) launched onto.
    series, firsts = group_rows_by_keys(device, stream_code)
    depths = depth_per_stream(series, ops.api_ts[mine], ops.end_ts[mine])
    names = track_names(trace, np.unique(device).tolist())
    rows = []
    for code, max_depth, mean, launches in depths:
        first = int(firsts[code])
        device_id = int(device[first])
        if device_id in names:  # an op track under no device track names no device
            stream = ops.stream_names[int(stream_code[first])]
            rows.append((device_id, names[device_id], stream, max_depth, mean, launches))
    # by device and stream, as a GROUP BY would (a stream track without a name first)
    rows.sort(key=lambda r: (r[0], r[2] is not None, r[2] or ""))
    trace.execute(table_sql("xpu_stream_queue", COLUMNS, rows))
