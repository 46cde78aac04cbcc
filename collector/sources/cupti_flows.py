"""Flows of a CUPTI stream: each GPU op joined to the API call that caused it by correlation
id.  A GPU record carries the outermost API's correlation id, or a nested driver call's,
which the stream's API_ALIAS rows map back to the runtime call; the kernels of a graph
launch all carry the graph launch's id, so one call fans out to every kernel of it."""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector.sources.cupti_rows import GpuRows, find_rows
from collector.sources.cupti_stream import Stream


def api_rows_of(stream: Stream, corr: np.ndarray, counts: Counter[str] | None = None) -> np.ndarray:
    """The API table's row of the call with each correlation id, or of the runtime call of
    the nested driver call with that id (API_ALIAS rows); -1 where there is none."""
    api = stream.table("API")
    if not api.rows:
        return np.full(len(corr), -1, np.int64)
    api_corr = np.asarray(api["correlation_id"], np.int64)
    row = find_rows(api_corr, corr)
    alias = stream.table("API_ALIAS")
    if alias.rows:
        missing = np.flatnonzero(row < 0)
        runtime = find_rows(np.asarray(alias["driver_correlation_id"], np.int64), corr[missing])
        owner = np.asarray(alias["runtime_correlation_id"], np.int64)[np.maximum(runtime, 0)]
        via = np.where(runtime >= 0, find_rows(api_corr, owner), -1)
        row[missing] = via
        if counts is not None:
            counts["gpu_ops_matched_via_alias"] += int((via >= 0).sum())
    return row


def link(stream: Stream, gpu: GpuRows, counts: Counter[str]) -> tuple[np.ndarray, np.ndarray]:
    """Flows as (CPU rows, GPU rows): every GPU op to the API call with its correlation id,
    or to the runtime call of the nested driver call with that id (API_ALIAS rows).  A CPU
    row is the API call's row in the API table: the API calls are the first CPU rows."""
    corr = gpu.column("correlation_id")
    none = np.zeros(0, np.int64)
    if not stream.table("API").rows or not len(corr):
        counts["gpu_ops_without_api"] += len(corr)
        return none, none
    row = api_rows_of(stream, corr, counts)
    linked = np.flatnonzero(row >= 0)
    counts["gpu_ops_without_api"] += len(corr) - len(linked)
    return row[linked], linked
