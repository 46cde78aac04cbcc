"""Events at a point in time, written as they come: instants on a thread's track and
perf samples (CPU timer samples) on the producer's sample sequence of their timebase.
(Slices go through batch_writer.py.)"""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import wire
from exporters.perfetto.producer_state import ProducerState

_TYPE_INSTANT = pb.TrackEvent.TYPE_INSTANT


def write_instant(prod: ProducerState, ev: model.Instant) -> None:
    # An absolute timestamp keeps an instant from moving the incremental clock of the
    # thread's track, and the thread's own track (an instant nests anywhere) keeps it out
    # of lane placement, where it would push later slices onto extra lanes.
    seq = prod.seq
    uuid = prod.trace.tracks.thread(ev.pid, ev.tid, None)
    prod.trace.chunks.emit_bytes(
        seq.track_event(
            seq.absolute_timestamp(ev.ts),
            _TYPE_INSTANT,
            uuid,
            ev.name,
            ev.category,
            ev.args.items(),
        )
    )


def write_sample(
    prod: ProducerState,
    pid: int,
    tid: int,
    ts: int,
    stack: model.Stack,
    timebase: str,
    cpu: int | None,
) -> None:
    seq = prod.sample_sequence(timebase)
    prod.trace.tracks.thread(pid, tid, None)
    sample = [
        wire.varint_field(wire.SAMPLE_PID, pid),
        wire.varint_field(wire.SAMPLE_TID, tid),
        wire.varint_field(wire.SAMPLE_CALLSTACK_IID, seq.callstack_iid(stack)),
    ]
    if cpu is not None:
        sample.insert(0, wire.varint_field(wire.SAMPLE_CPU, cpu))
    body = b"".join(
        (
            seq.timestamp(ts),
            seq.head_needs,
            wire.len_field(wire.PACKET_PERF_SAMPLE, b"".join(sample)),
            seq.interned_field() if seq.dirty else b"",
        )
    )
    prod.trace.chunks.emit_bytes(wire.frame(body))
    prod.trace.note_ts(ts)
    prod.trace.counts["cpu_samples"] += 1
