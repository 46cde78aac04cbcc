"""Busy time per time bin, the numbers behind the report's GPU timeline: busy intervals
(per stream and per device, gpu_busy.sql) cut at the edges of equal bins and summed.

In numpy rather than SQL: the engine's GROUP BY and join against the bins (SQLite in
wasm) cost far more than reading the intervals out and binning them here."""

from __future__ import annotations

import re

import numpy as np

_LEADING_INT = re.compile(r"\s*[+-]?\d+")


def busy_per_bin(
    series: np.ndarray,
    ts: np.ndarray,
    end_ts: np.ndarray,
    n_series: int,
    t0: int,
    bin_ns: int,
    bins: int,
) -> np.ndarray:
    """(n_series, bins) int64: for each series (0..n_series-1, one per interval), the time
    its intervals cover in each bin [t0 + i*bin_ns, t0 + (i+1)*bin_ns).  An interval is
    clipped to the bins' span and split at bin edges; overlapping intervals of one series
    count twice (the busy intervals given are merged already)."""
    out = np.zeros((n_series, bins), dtype=np.int64)
    lo = np.maximum(ts, t0)
    hi = np.minimum(end_ts, t0 + bins * bin_ns)
    keep = np.flatnonzero(hi > lo)
    if keep.size == 0:
        return out
    lo, hi, series = lo[keep], hi[keep], series[keep]
    first = (lo - t0) // bin_ns
    last = (hi - 1 - t0) // bin_ns
    counts = last - first + 1
    # One row per (interval, bin it touches): most intervals touch one bin.
    owner = np.repeat(np.arange(keep.size), counts)
    starts = np.cumsum(counts) - counts
    b = first[owner] + (np.arange(owner.size) - starts[owner])
    part = np.minimum(hi[owner], t0 + (b + 1) * bin_ns) - np.maximum(lo[owner], t0 + b * bin_ns)
    np.add.at(out, (series[owner], b), part)
    return out


def stream_number(stream: str) -> int:
    """The number in a stream track's name ('Stream 7' -> 7; 0 where none), the way SQLite's
    CAST(substr(name, 8) AS INTEGER) reads it: streams sort by number, not as text."""
    match = _LEADING_INT.match(stream[7:])
    return int(match.group()) if match else 0
