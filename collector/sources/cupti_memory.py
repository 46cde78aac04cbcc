"""Device memory of a CUPTI stream (MEMORY rows: CUPTI's MEMORY2 records of cudaMalloc,
cuMemAlloc, cudaMallocAsync, their frees): each record's size and address as args of its API
call's slice (whose launch stack is the allocation site), and the bytes each allocation adds
to or each release takes from its device, for the `device memory in use` counter track
that DeviceMemory builds over all processes."""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector import model
from collector.gpu_metrics.catalog import MEMORY_IN_USE
from collector.sources.cupti_rows import CpuRows, find_rows
from collector.sources.cupti_stream import Stream

ALLOCATION = 1  # CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION
RELEASE = 2  # CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
# CUpti_ActivityMemoryKind values counted as device memory.
DEVICE_KINDS = (3,)  # CUPTI_ACTIVITY_MEMORY_KIND_DEVICE


def api_row_of(stream: Stream, corr: np.ndarray) -> np.ndarray:
    """The API table row of each correlation id (a runtime call's, or the runtime call of a
    nested driver call's, by API_ALIAS), -1 where none."""
    api = stream.table("API")
    if not api.rows:
        return np.full(len(corr), -1, np.int64)
    api_corr = np.asarray(api["correlation_id"], np.int64)
    row = find_rows(api_corr, corr)
    alias = stream.table("API_ALIAS")
    missing = np.flatnonzero(row < 0)
    if alias.rows and len(missing):
        runtime = find_rows(np.asarray(alias["driver_correlation_id"], np.int64), corr[missing])
        owner = np.asarray(alias["runtime_correlation_id"], np.int64)[np.maximum(runtime, 0)]
        row[missing] = np.where(runtime >= 0, find_rows(api_corr, owner), -1)
    return row


def release_deltas(
    device: np.ndarray, address: np.ndarray, op: np.ndarray, size: np.ndarray
) -> np.ndarray:
    """Minus the size of the allocation each release gives back (0 for other rows, and for
    a release whose allocation is not in the table: made before the recording or a
    window).  Rows are in time order; grouped by (device, address), a release's allocation
    is the row just before it."""
    delta = np.zeros(len(op), np.int64)
    if not len(op):
        return delta
    order = np.lexsort((np.arange(len(op)), address, device))
    d, a, o = device[order], address[order], op[order]
    same = np.zeros(len(op), bool)
    same[1:] = (d[1:] == d[:-1]) & (a[1:] == a[:-1]) & (o[:-1] == ALLOCATION)
    released = np.flatnonzero(same & (o == RELEASE))
    delta[order[released]] = -size[order[released - 1]]
    return delta


class DeviceMemory:
    """Device memory in use per device, summed over every process's allocations."""

    def __init__(self) -> None:
        self._ts: list[np.ndarray] = []
        self._device: list[np.ndarray] = []
        self._delta: list[np.ndarray] = []

    def add_process(self, stream: Stream, cpu: CpuRows, counts: Counter[str]) -> None:
        """One process's MEMORY rows: args on their API calls (the API rows, first in `cpu`)
        and their bytes for the counter.  A release of an address this process was not seen
        to allocate (before a capture window, say) is counted, not subtracted."""
        mem = stream.table("MEMORY")
        if not mem.rows:
            return
        ts = np.asarray(mem["timestamp"], np.int64)
        order = np.argsort(ts, kind="stable")
        ts = ts[order]
        corr = np.asarray(mem["correlation_id"], np.int64)[order]
        device = np.asarray(mem["device"], np.int64)[order]
        op = np.asarray(mem["operation"], np.int64)[order]
        kind = np.asarray(mem["memory_kind"], np.int64)[order]
        address = np.asarray(mem["address"], np.uint64)[order]
        size = np.asarray(mem["bytes"], np.int64)[order]
        counts["records_memory"] += mem.rows
        delta = release_deltas(device, address, op, size)
        delta[op == ALLOCATION] = size[op == ALLOCATION]
        unmatched = (op == RELEASE) & (delta == 0)
        counts["memory_frees_unmatched"] += int(unmatched.sum())
        what = np.where(op == ALLOCATION, "alloc", np.where(op == RELEASE, "free", "other"))
        shown = np.where(op == RELEASE, -delta, size)  # a release shows what it gave back
        args = [
            (("memory_op", w), ("bytes", b), ("address", f"{a:#x}"), ("device", d))
            for w, b, a, d in zip(
                what.tolist(), shown.tolist(), address.tolist(), device.tolist(), strict=True
            )
        ]
        device_memory = np.isin(kind, DEVICE_KINDS)
        keep = device_memory & (delta != 0)
        self._ts.append(ts[keep])
        self._device.append(device[keep])
        self._delta.append(delta[keep])
        rows = api_row_of(stream, corr)
        called = np.flatnonzero(rows >= 0)
        counts["memory_records_without_api"] += len(rows) - len(called)
        cpu.override_args(rows[called], [args[i] for i in called.tolist()])

    def series(self) -> list[model.GpuCounterSeries]:
        """`device memory in use` (bytes) per device: the running sum of the allocations
        and releases, one value at each."""
        if not self._ts:
            return []
        ts = np.concatenate(self._ts)
        device = np.concatenate(self._device)
        delta = np.concatenate(self._delta)
        out = []
        for dev in np.unique(device).tolist():
            mine = device == dev
            order = np.argsort(ts[mine], kind="stable")
            times = ts[mine][order]
            in_use = np.cumsum(delta[mine][order]).astype(float)
            out.append(model.GpuCounterSeries(int(dev), MEMORY_IN_USE, "bytes", times, in_use))
        return out
