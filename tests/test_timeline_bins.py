"""The report timeline's binning (numpy) against the definition: each interval's overlap
with each bin, summed per series."""

from __future__ import annotations

import random

import numpy as np
import pytest

from exporters.report.timeline_bins import busy_per_bin, stream_number


def _reference(rows: list[tuple[int, int, int]], n: int, t0: int, w: int, bins: int) -> list:
    out = [[0] * bins for _ in range(n)]
    for series, ts, end in rows:
        for b in range(bins):
            lo, hi = t0 + b * w, t0 + (b + 1) * w
            out[series][b] += max(0, min(end, hi) - max(ts, lo))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_bins_are_each_intervals_overlap_with_each_bin(seed: int) -> None:
    rng = random.Random(seed)
    t0, w, bins, n = 1_700_000_000_000_000_000 + rng.randrange(1000), rng.randrange(1, 500), 37, 4
    rows = []
    for _ in range(400):
        ts = t0 + rng.randrange(-3 * w, (bins + 3) * w)  # some start before the bins, end after
        length = rng.choice([0, 1, rng.randrange(w), rng.randrange(5 * w), rng.randrange(bins * w)])
        rows.append((rng.randrange(n), ts, ts + length))
    series, ts, end = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=True))
    got = busy_per_bin(series, ts, end, n, t0, w, bins)
    assert got.dtype == np.int64 and got.shape == (n, bins)
    assert got.tolist() == _reference(rows, n, t0, w, bins)
    assert got.sum() > 0


def test_no_intervals() -> None:
    empty = np.array([], dtype=np.int64)
    assert busy_per_bin(empty, empty, empty, 2, 0, 10, 3).tolist() == [[0, 0, 0], [0, 0, 0]]


def test_streams_sort_by_number() -> None:
    names = ["Stream 10", "Stream 7", "Stream 7 (lane)", "*", "other"]
    assert [stream_number(s) for s in names] == [10, 7, 7, 0, 0]
