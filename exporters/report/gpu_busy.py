"""GPU busy time per device (stream '*') and per stream, for the report's busy/idle table and
its timeline: the islands of exporters/analysis/busy.py, per device over all its streams
(the analysis's 'any' islands) and per stream (ops overlap on a stream's sibling lanes).
Over the analysed span, `xpu_report_window` (gpu_busy.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from collector.arrays import group_rows_by_keys, unique_with_inverse
from exporters.analysis.busy import (
    ANY,
    Islands,
    gpu_busy,
    islands,
    running_reach,
    track_names,
)
from exporters.perfetto.engine.trace_processor import Trace

DEVICE = "*"  # the stream name of a device's own row


@dataclass(frozen=True)
class StreamIslands:
    """Busy intervals of each series (a device's streams together, or one stream)."""

    device: list[int]  # per series: the device track id
    device_name: list[str]  # per series: the device's name ('GPU ?' where it has none)
    stream: list[str]  # per series: the stream's name, DEVICE for the device
    ops: list[int]  # per series: the ops it ran
    found: Islands  # group = series index


def stream_islands(trace: Trace) -> StreamIslands:
    busy = gpu_busy(trace)
    ops = busy.ops
    if ops.ts.size == 0:
        return StreamIslands([], [], [], [], busy.device_islands())
    streams, stream_code = np.array(ops.stream_names, dtype=object), ops.stream
    devices, device_code = unique_with_inverse(ops.device)
    # Series 0..len(devices)-1: the devices; then one per (device, stream) that has ops,
    # in (device, stream) order.
    series, firsts = group_rows_by_keys(device_code, stream_code)
    counts = np.bincount(series, minlength=len(firsts))
    per_stream = islands(running_reach(series, ops.ts, ops.end_ts, ops.by_time))
    per_device = busy.device_islands(ANY)
    device_ops = np.bincount(device_code, minlength=len(devices))
    found = Islands(
        np.r_[np.searchsorted(devices, per_device.group), per_stream.group + len(devices)],
        np.r_[per_device.ts, per_stream.ts],
        np.r_[per_device.end_ts, per_stream.end_ts],
    )
    device = devices.tolist() + devices[device_code[firsts]].tolist()
    names = track_names(trace, device)
    return StreamIslands(
        device=device,
        device_name=[names.get(d) or "GPU ?" for d in device],
        stream=[DEVICE] * len(devices) + [str(s) for s in streams[stream_code[firsts]]],
        ops=device_ops.tolist() + counts.tolist(),
        found=found,
    )


def stream_rows(trace: Trace, busy: StreamIslands) -> list[dict[str, Any]]:
    """The busy/idle table: per device, then its streams by busy time."""
    dur = int(trace.scalar("select dur from xpu_report_window"))
    spent = np.zeros(len(busy.device), dtype=np.int64)
    np.add.at(spent, busy.found.group, busy.found.end_ts - busy.found.ts)
    streams = sorted(
        zip(busy.device_name, busy.stream, map(int, spent), busy.ops, strict=True),
        key=lambda r: (r[0], r[1] != DEVICE, -r[2], r[1]),
    )
    return [
        {
            "device": name,
            "stream": stream,
            "busy_ns": ns,
            "idle_ns": dur - ns,
            "busy_pct": 100.0 * ns / dur,
            "ops": int(n),
        }
        for name, stream, ns, n in streams
    ]
