"""Counter tracks: a GpuCounterSeries as TYPE_COUNTER track events on its GPU's counter
track (tracks.py).

Counters are few next to slices (10 Hz x a dozen counters per GPU), so each value is one
upb-built packet on the descriptor sequence with an absolute timestamp in the trace's
clock: no incremental clock, no interning, and trace_processor sorts them in.
"""

from __future__ import annotations

import math

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto.trace_state import TraceState

_TYPE_COUNTER = pb.TrackEvent.TYPE_COUNTER


def write_counter_series(trace: TraceState, series: model.GpuCounterSeries) -> int:
    """The series' values on its counter track; returns how many were written (NaN and
    infinite values, which a counter track cannot hold, are skipped and counted as
    `counter_values_skipped`)."""
    if len(series.ts) != len(series.values):
        raise ValueError(f"{series.name}: {len(series.ts)} times for {len(series.values)} values")
    if not len(series.ts):
        return 0
    track = trace.tracks.gpu_counter(series.device, series.name, series.unit)
    seq_id = trace.descriptor_seq_id
    clock_id = trace.clock_id
    emit = trace.chunks.emit
    written = 0
    for ts, value in zip(series.ts, series.values, strict=True):
        value = float(value)
        if not math.isfinite(value):
            trace.counts["counter_values_skipped"] = (
                trace.counts.get("counter_values_skipped", 0) + 1
            )
            continue
        pkt = pb.TracePacket(
            trusted_packet_sequence_id=seq_id, timestamp=int(ts), timestamp_clock_id=clock_id
        )
        event = pkt.track_event
        event.type = _TYPE_COUNTER
        event.track_uuid = track
        event.double_counter_value = value
        emit(pkt)
        written += 1
    trace.note_ts(int(min(series.ts)))
    trace.counts["counter_values"] = trace.counts.get("counter_values", 0) + written
    return written
