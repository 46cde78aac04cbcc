"""Queue depth per stream (`xpu_stream_queue`): the ops launched onto a stream and not yet
finished, seen at each launch; per stream its maximum and its mean over the launches.

A running sum over every launch and every end, in numpy: as a window function in the
engine's SQL it took 0.22 s for the 48k launches of a 1M-slice trace (SQLite in wasm,
~1.5 us a row per window), read out and summed here 0.03 s.  The table is made from the
few rows it has (one per stream), for `query` and the report as before."""

from __future__ import annotations

import numpy as np

from exporters.perfetto.trace_processor import Trace, table_sql

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
    """`xpu_stream_queue` from the launches of `xpu_launch` (launches.sql)."""
    ops = trace.query_arrays("select device_track_id, stream, api_ts, end_ts from xpu_launch")
    keys = list(zip(ops["device_track_id"].tolist(), ops["stream"].tolist(), strict=True))
    codes: dict[tuple[int, str], int] = {}
    stream = np.fromiter((codes.setdefault(k, len(codes)) for k in keys), np.int64, len(keys))
    by_code = {code: key for key, code in codes.items()}
    names = {
        r["id"]: r["name"]
        for r in trace.query(
            "select id, name from track where id in (select distinct device_track_id "
            "from xpu_launch)"
        )
    }
    rows = []
    for code, max_depth, mean, launches in depth_per_stream(
        stream, ops["api_ts"].astype(np.int64), ops["end_ts"].astype(np.int64)
    ):
        device, name = by_code[code]
        if device in names:  # an op track under no device track names no device
            rows.append((device, names[device], name, max_depth, mean, launches))
    trace.execute(table_sql("xpu_stream_queue", COLUMNS, rows))
