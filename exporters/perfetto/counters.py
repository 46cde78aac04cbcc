"""Counter tracks: a GpuCounterSeries as TYPE_COUNTER track events on its GPU's counter
track (tracks.py).

Counters are few next to slices (10 Hz x a dozen counters per GPU), so each value is one
packet on the descriptor sequence with an absolute timestamp in the trace's clock: no
incremental clock, no interning, and trace_processor sorts them in.  The packets are the
bytes upb would write (fields in number order: timestamp, sequence id, the track event's
type, track and double value, clock id), built by hand from wire.py pieces: an hour of 17
counters at 10 Hz is 612k packets, too many for a upb message object each.
"""

from __future__ import annotations

import math
import struct

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import wire
from exporters.perfetto.trace_state import TraceState

_TYPE_COUNTER = pb.TrackEvent.TYPE_COUNTER
_EVENT_DOUBLE_COUNTER_VALUE = 44  # TrackEvent.double_counter_value (fixed64)
_DOUBLE = struct.Struct("<d").pack
_TS_TAG = wire.key(wire.PACKET_TIMESTAMP, wire.VARINT)


def write_counter_series(trace: TraceState, series: model.GpuCounterSeries) -> int:
    """The series' values on its counter track; returns how many were written (NaN and
    infinite values, which a counter track cannot hold, are skipped and counted as
    `counter_values_skipped`)."""
    if len(series.ts) != len(series.values):
        raise ValueError(f"{series.name}: {len(series.ts)} times for {len(series.values)} values")
    if not len(series.ts):
        return 0
    track = trace.tracks.gpu_counter(series.device, series.name, series.unit)
    event = wire.event_head(_TYPE_COUNTER, track) + wire.key(
        _EVENT_DOUBLE_COUNTER_VALUE, wire.FIXED64
    )
    # Between the timestamp and the value: the sequence id, the track event's tag, length
    # and head; after the value: the clock id.  All constant for the series.
    middle = (
        wire.varint_field(wire.PACKET_SEQUENCE_ID, trace.descriptor_seq_id)
        + wire.TRACK_EVENT_PREFIX[len(event) + 8]
        + event
    )
    clock = wire.varint_field(wire.PACKET_TIMESTAMP_CLOCK_ID, trace.clock_id)
    frame_prefix = wire.FRAME_PREFIX
    varint = wire.varint
    emit = trace.chunks.emit_bytes
    times = [int(t) for t in series.ts]
    written = skipped = 0
    for ts, value in zip(times, map(float, series.values), strict=True):
        if not math.isfinite(value):
            skipped += 1
            continue
        body = _TS_TAG + varint(ts) + middle + _DOUBLE(value) + clock
        emit(frame_prefix[len(body)] + body)
        written += 1
    trace.note_ts(min(times))
    counts = trace.counts
    counts["counter_values"] = counts.get("counter_values", 0) + written
    if skipped:
        counts["counter_values_skipped"] = counts.get("counter_values_skipped", 0) + skipped
    return written
