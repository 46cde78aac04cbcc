"""Capture windows as disjoint time spans, and whether a timestamp falls in one: what the
samplers followed from record's side keep after the run."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from collector.model import CaptureWindow


def window_spans(windows: Sequence[CaptureWindow]) -> list[tuple[int, int]]:
    """The windows' spans merged where they overlap (windows of several processes)."""
    merged: list[tuple[int, int]] = []
    for start, end in sorted((w.start, w.end) for w in windows):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def inside(spans: Sequence[tuple[int, int]], starts: Sequence[int], ts: int) -> bool:
    """Is `ts` in one of the disjoint sorted `spans` (`starts`: their starts)?"""
    i = bisect.bisect_right(starts, ts) - 1
    return i >= 0 and ts <= spans[i][1]
