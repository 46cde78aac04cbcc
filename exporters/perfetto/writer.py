"""The one Perfetto encoder: collector.model events in, a native .perfetto-trace out.

Streaming: every packet goes to disk as soon as it is encoded; only a bounded reorder
window of slices (to place overlapping slices on lanes in start order) and the interning
tables stay in memory.  The file is written as `OUT.tmp` and renamed on a clean close, so
a failed run never leaves a half-written trace under the requested name.

Encoding contract (the SQL-facing part is in docs/ARCHITECTURE.md):
- process/thread tracks from ProcessDescriptor/ThreadDescriptor-carrying TrackDescriptors;
- `GPU D (<name>)` root tracks with one `Stream N` child track per stream (plus sibling
  lanes of the same name when ops overlap);
- slices as TrackEvent BEGIN/END pairs with interned names and categories, debug
  annotations, v2 flow ids;
- stacks as interned mappings -> frames -> callstacks; CPU timer samples and launch
  stacks are PerfSamples on sequences whose timebases are named `cpu-clock` and
  `xpu_perf.launch_stack`, which is how SQL tells them apart;
- one ClockSnapshot, and an `xpu_perf_metadata` instant carrying the run's counters.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import BinaryIO

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto.lanes import LaneSet

TOOL_NAME = "xpu-perf"
METADATA_CATEGORY = "xpu_perf_metadata"
CPU_SAMPLE_TIMEBASE = "cpu-clock"
LAUNCH_STACK_TIMEBASE = "xpu_perf.launch_stack"

_SEQ_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED
_SEQ_NEEDS = pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
_TYPE_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_TYPE_END = pb.TrackEvent.TYPE_SLICE_END
_TYPE_INSTANT = pb.TrackEvent.TYPE_INSTANT
# Slices are buffered and placed on lanes in start order in windows of this size; a
# slice that arrives later than the window still lands safely (see lanes.py).
REORDER_WINDOW = 65536


def _frame_packet(payload: bytes) -> bytes:
    """Frame one serialized TracePacket as `Trace.packet` (field 1, length-delimited)."""
    n = len(payload)
    head = bytearray(b"\x0a")
    while n > 0x7F:
        head.append((n & 0x7F) | 0x80)
        n >>= 7
    head.append(n)
    return bytes(head) + payload


class _Interner:
    """One interning table: value -> iid, new entries reported once."""

    __slots__ = ("fresh", "ids")

    def __init__(self) -> None:
        self.ids: dict[object, int] = {}
        self.fresh: list[tuple[int, object]] = []

    def get(self, value: object) -> int:
        iid = self.ids.get(value)
        if iid is None:
            iid = len(self.ids) + 1
            self.ids[value] = iid
            self.fresh.append((iid, value))
        return iid


class _Sequence:
    """One trusted_packet_sequence_id with its own interning state."""

    def __init__(self, writer: TraceWriter, seq_id: int, timebase: str | None = None) -> None:
        self.writer = writer
        self.seq_id = seq_id
        self.event_names = _Interner()
        self.categories = _Interner()
        self.annotation_names = _Interner()
        self.annotation_strings = _Interner()  # string arg values repeat a lot (shapes, kinds)
        self.strings = _Interner()  # function names and mapping paths share one table
        self.mappings = _Interner()
        self.frames = _Interner()
        self.callstacks = _Interner()
        first = pb.TracePacket()
        first.trusted_packet_sequence_id = seq_id
        first.sequence_flags = _SEQ_CLEARED
        first.incremental_state_cleared = True
        first.first_packet_on_sequence = True
        defaults = first.trace_packet_defaults
        defaults.timestamp_clock_id = writer.clock_id
        if timebase is not None:
            defaults.perf_sample_defaults.timebase.name = timebase
            if writer.sample_frequency_hz:
                defaults.perf_sample_defaults.timebase.frequency = writer.sample_frequency_hz
        writer._emit(first)

    def track_event(
        self,
        ts: int,
        kind: int,
        uuid: int,
        name: str,
        category: str,
        args: Iterable[tuple[str, model.ArgValue]] = (),
    ) -> tuple[pb.TracePacket, pb.TrackEvent]:
        """A BEGIN or INSTANT TrackEvent packet with interned name, category and args."""
        pkt = self.packet(ts)
        pkt.sequence_flags = _SEQ_NEEDS
        te = pkt.track_event
        te.type = kind
        te.track_uuid = uuid
        te.name_iid = self.event_names.get(name)
        if category:
            te.category_iids.append(self.categories.get(category))
        for key, value in args:
            _annotate(self, te, key, value)
        return pkt, te

    def packet(self, ts: int | None = None) -> pb.TracePacket:
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self.seq_id
        if ts is not None:
            pkt.timestamp = ts
        return pkt

    def flush_interned(self, pkt: pb.TracePacket) -> None:
        """Attach entries interned while building `pkt` to `pkt` itself."""
        if not (
            self.event_names.fresh
            or self.categories.fresh
            or self.annotation_names.fresh
            or self.annotation_strings.fresh
            or self.strings.fresh
            or self.mappings.fresh
            or self.frames.fresh
            or self.callstacks.fresh
        ):
            return
        data = pkt.interned_data
        for iid, name in self.event_names.fresh:
            data.event_names.add(iid=iid, name=str(name))
        for iid, name in self.categories.fresh:
            data.event_categories.add(iid=iid, name=str(name))
        for iid, name in self.annotation_names.fresh:
            data.debug_annotation_names.add(iid=iid, name=str(name))
        for iid, value in self.annotation_strings.fresh:
            data.debug_annotation_string_values.add(
                iid=iid, str=str(value).encode("utf-8", "replace")
            )
        for iid, text in self.strings.fresh:
            kind, value = text  # type: ignore[misc]
            target = data.function_names if kind == "f" else data.mapping_paths
            target.add(iid=iid, str=value.encode("utf-8", "replace"))
        for iid, key in self.mappings.fresh:
            path_iid, build_id = key  # type: ignore[misc]
            m = data.mappings.add(iid=iid)
            m.path_string_ids.append(path_iid)
            if build_id:
                data.build_ids.add(iid=iid, str=build_id.encode())
                m.build_id = iid
        for iid, key in self.frames.fresh:
            fn_iid, mapping_iid, rel_pc = key  # type: ignore[misc]
            data.frames.add(iid=iid, function_name_id=fn_iid, mapping_id=mapping_iid, rel_pc=rel_pc)
        for iid, frame_ids in self.callstacks.fresh:
            data.callstacks.add(iid=iid, frame_ids=frame_ids)  # type: ignore[arg-type]
        for table in (
            self.event_names,
            self.categories,
            self.annotation_names,
            self.annotation_strings,
            self.strings,
            self.mappings,
            self.frames,
            self.callstacks,
        ):
            table.fresh.clear()

    def callstack_iid(self, stack: model.Stack) -> int:
        known = self.callstacks.ids.get(stack)
        if known is not None:
            return known
        frame_ids = []
        for fr in stack.frames:
            fn = self.strings.get(("f", fr.function))
            mapping = self.mappings.get(
                (self.strings.get(("m", fr.module or "[unknown]")), fr.build_id)
            )
            frame_ids.append(self.frames.get((fn, mapping, fr.rel_pc)))
        iid = len(self.callstacks.ids) + 1
        self.callstacks.ids[stack] = iid
        self.callstacks.fresh.append((iid, frame_ids))
        return iid


def _annotate(seq: _Sequence, te: pb.TrackEvent, key: str, value: model.ArgValue) -> None:
    """Add one debug annotation (arg `debug.<key>` in SQL) with interned name and text."""
    ann = te.debug_annotations.add()
    ann.name_iid = seq.annotation_names.get(key)
    if isinstance(value, bool):
        ann.bool_value = value
    elif isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            ann.int_value = value
        else:
            ann.string_value_iid = seq.annotation_strings.get(str(value))
    elif isinstance(value, float):
        ann.double_value = value
    else:
        ann.string_value_iid = seq.annotation_strings.get(value)


class Producer:
    """Writes the events of one source (cupti, ebpf, kineto...) on its own sequences."""

    def __init__(self, writer: TraceWriter, name: str, seq_id: int) -> None:
        self.writer = writer
        self.name = name
        self._seq = _Sequence(writer, seq_id)
        self._sample_seqs: dict[str, _Sequence] = {}
        self._pending: list[model.CpuSlice | model.GpuOp] = []

    def write(self, event: model.Event) -> None:
        if isinstance(event, (model.CpuSlice, model.GpuOp)):
            self._pending.append(event)
            if len(self._pending) >= REORDER_WINDOW:
                self.flush()
        elif isinstance(event, model.CpuSample):
            self._write_sample(
                event.pid, event.tid, event.ts, event.stack, CPU_SAMPLE_TIMEBASE, event.cpu
            )
        elif isinstance(event, model.ThreadInfo):
            self.writer.tracks.thread(event.pid, event.tid, event.name)
        elif isinstance(event, model.ProcessInfo):
            self.writer.tracks.process(event.pid, event.name, event.cmdline)
        elif isinstance(event, model.GpuDevice):
            self.writer.tracks.gpu_device(event.device, event.name)
        elif isinstance(event, model.Instant):
            self._write_instant(event)
        else:
            raise TypeError(f"not a trace event: {event!r}")

    def write_all(self, events: Iterable[model.Event]) -> None:
        for event in events:
            self.write(event)

    def flush(self) -> None:
        """Place buffered slices on lanes in start order and write them out."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        pending.sort(key=lambda e: (e.ts, -e.dur))
        tracks = self.writer.tracks
        for ev in pending:
            if isinstance(ev, model.GpuOp):
                uuid = tracks.stream_lane(ev.device, ev.stream, ev.ts, ev.dur)
            else:
                uuid = tracks.thread_lane(ev.pid, ev.tid, ev.ts, ev.dur)
            self._write_slice(uuid, ev)
            if isinstance(ev, model.CpuSlice) and ev.launch_stack is not None:
                self._write_sample(
                    ev.pid, ev.tid, ev.ts, ev.launch_stack, LAUNCH_STACK_TIMEBASE, None
                )
        self.writer.counts["slices"] += len(pending)
        self.writer.note_ts(pending[0].ts)

    # -- encoding -----------------------------------------------------------------------
    def _write_slice(self, uuid: int, ev: model.CpuSlice | model.GpuOp) -> None:
        seq = self._seq
        args: list[tuple[str, model.ArgValue]] = []
        if isinstance(ev, model.GpuOp):
            if ev.correlation_id is not None:
                args.append(("correlation_id", ev.correlation_id))
            args += (("device", ev.device), ("stream", ev.stream))
        args += ev.args.items()
        pkt, te = seq.track_event(ev.ts, _TYPE_BEGIN, uuid, ev.name, ev.category, args)
        if ev.flow_ids:
            te.flow_ids.extend(ev.flow_ids)
        if ev.terminating_flow_ids:
            te.terminating_flow_ids.extend(ev.terminating_flow_ids)
        seq.flush_interned(pkt)
        emit = self.writer._emit
        emit(pkt)
        end = seq.packet(ev.ts + max(ev.dur, 0))
        end.track_event.type = _TYPE_END
        end.track_event.track_uuid = uuid
        emit(end)

    def _write_instant(self, ev: model.Instant) -> None:
        seq = self._seq
        uuid = self.writer.tracks.thread_lane(ev.pid, ev.tid, ev.ts, 0)
        pkt, _ = seq.track_event(ev.ts, _TYPE_INSTANT, uuid, ev.name, ev.category, ev.args.items())
        seq.flush_interned(pkt)
        self.writer._emit(pkt)

    def _write_sample(
        self, pid: int, tid: int, ts: int, stack: model.Stack, timebase: str, cpu: int | None
    ) -> None:
        seq = self._sample_seqs.get(timebase)
        if seq is None:
            seq = self._sample_seqs[timebase] = _Sequence(
                self.writer, self.writer._next_seq_id(), timebase
            )
        self.writer.tracks.thread(pid, tid, None)
        pkt = seq.packet(ts)
        pkt.sequence_flags = _SEQ_NEEDS
        sample = pkt.perf_sample
        sample.pid = pid
        sample.tid = tid
        if cpu is not None:
            sample.cpu = cpu
        sample.callstack_iid = seq.callstack_iid(stack)
        seq.flush_interned(pkt)
        self.writer._emit(pkt)
        self.writer.note_ts(ts)
        key = "cpu_samples" if timebase == CPU_SAMPLE_TIMEBASE else "launch_stacks"
        self.writer.counts[key] += 1


class _Tracks:
    """Track uuids and descriptors: processes, threads (+ lanes), GPUs, streams (+ lanes)."""

    def __init__(self, writer: TraceWriter) -> None:
        self._writer = writer
        self._next_uuid = 1
        self._processes: dict[int, int] = {}
        self._threads: dict[tuple[int, int], int] = {}
        self._thread_names: dict[tuple[int, int], str] = {}
        self._thread_lanes: dict[tuple[int, int], tuple[LaneSet, list[int]]] = {}
        self._gpus: dict[int, int] = {}
        self._gpu_names: dict[int, str] = {}
        self._stream_lanes: dict[tuple[int, int], tuple[LaneSet, list[int]]] = {}
        self.metadata_track = 0

    def _uuid(self) -> int:
        uuid = self._next_uuid
        self._next_uuid += 1
        return uuid

    def _descriptor(self, fill: pb.TrackDescriptor) -> None:
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self._writer.descriptor_seq_id
        pkt.track_descriptor.CopyFrom(fill)
        self._writer._emit(pkt)

    def process(self, pid: int, name: str | None = None, cmdline: tuple[str, ...] = ()) -> int:
        uuid = self._processes.get(pid)
        if uuid is not None and name is None:
            return uuid
        if uuid is None:
            uuid = self._processes[pid] = self._uuid()
        desc = pb.TrackDescriptor(uuid=uuid)
        desc.process.pid = pid
        if name:
            desc.process.process_name = name
        if cmdline:
            desc.process.cmdline.extend(cmdline)
        self._descriptor(desc)
        return uuid

    def thread(self, pid: int, tid: int, name: str | None) -> int:
        key = (pid, tid)
        uuid = self._threads.get(key)
        if uuid is not None and (name is None or self._thread_names.get(key) == name):
            return uuid
        parent = self.process(pid)
        if uuid is None:
            uuid = self._threads[key] = self._uuid()
        if name:
            self._thread_names[key] = name
        self._describe_thread(uuid, parent, pid, tid, self._thread_names.get(key))
        # Lanes share the thread's name, so rename them too.
        lanes = self._thread_lanes.get(key)
        if lanes and name:
            for lane_uuid in lanes[1][1:]:
                self._describe_thread(lane_uuid, parent, pid, tid, name)
        return uuid

    def _describe_thread(
        self, uuid: int, parent: int, pid: int, tid: int, name: str | None
    ) -> None:
        desc = pb.TrackDescriptor(uuid=uuid, parent_uuid=parent)
        desc.thread.pid = pid
        desc.thread.tid = tid
        if name:
            desc.thread.thread_name = name
        self._descriptor(desc)

    def thread_lane(self, pid: int, tid: int, ts: int, dur: int) -> int:
        key = (pid, tid)
        entry = self._thread_lanes.get(key)
        if entry is None:
            entry = self._thread_lanes[key] = (LaneSet(), [self.thread(pid, tid, None)])
        lanes, uuids = entry
        index = lanes.place(ts, dur)
        while index >= len(uuids):
            # An extra lane is another track of the same thread (same pid/tid/name).
            lane_uuid = self._uuid()
            self._describe_thread(
                lane_uuid, self.process(pid), pid, tid, self._thread_names.get(key)
            )
            uuids.append(lane_uuid)
            self._writer.counts["extra_lanes"] += 1
        return uuids[index]

    def gpu_device(self, device: int, name: str | None) -> int:
        uuid = self._gpus.get(device)
        if uuid is not None and (name is None or self._gpu_names.get(device) == name):
            return uuid
        if uuid is None:
            uuid = self._gpus[device] = self._uuid()
        if name:
            self._gpu_names[device] = name
        label = self._gpu_names.get(device)
        desc = pb.TrackDescriptor(
            uuid=uuid, name=f"GPU {device} ({label})" if label else f"GPU {device}"
        )
        # Keep GPUs and their streams in numeric order in the UI.
        desc.child_ordering = pb.TrackDescriptor.ChildTracksOrdering.EXPLICIT
        desc.sibling_order_rank = device
        self._descriptor(desc)
        return uuid

    def stream_lane(self, device: int, stream: int, ts: int, dur: int) -> int:
        key = (device, stream)
        entry = self._stream_lanes.get(key)
        if entry is None:
            entry = self._stream_lanes[key] = (LaneSet(), [])
        lanes, uuids = entry
        index = lanes.place(ts, dur)
        while index >= len(uuids):
            lane_uuid = self._uuid()
            desc = pb.TrackDescriptor(
                uuid=lane_uuid, parent_uuid=self.gpu_device(device, None), name=f"Stream {stream}"
            )
            desc.sibling_order_rank = stream
            self._descriptor(desc)
            uuids.append(lane_uuid)
            if index:
                self._writer.counts["extra_lanes"] += 1
        return uuids[index]


class TraceWriter:
    """Streaming writer of one .perfetto-trace file.  Use as a context manager."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        command_line: Iterable[str] = (),
        clock_id: int = pb.BUILTIN_CLOCK_BOOTTIME,
        clock_snapshot: Mapping[int, int] | None = None,
        sample_frequency_hz: int = 0,
        compression_level: int = 6,
    ) -> None:
        """`clock_id` is the domain of every timestamp written; `clock_snapshot` maps
        builtin clock ids to readings taken at one instant (required unless the domain
        is BOOTTIME, trace_processor's default)."""
        from collector import __version__

        self.path = Path(path)
        self.tmp_path = self.path.with_name(self.path.name + ".tmp")
        self.clock_id = clock_id
        self.sample_frequency_hz = sample_frequency_hz
        self.compression_level = compression_level
        self._file: BinaryIO | None = open(self.tmp_path, "wb")  # noqa: SIM115
        self._buffer: list[bytes] = []
        self._buffered = 0
        self._seq_counter = 0
        self.bytes_written = 0
        self.min_ts: int | None = None
        self.counts: dict[str, int] = {
            "slices": 0,
            "cpu_samples": 0,
            "launch_stacks": 0,
            "extra_lanes": 0,
        }
        self._metadata: dict[str, model.ArgValue] = {
            "tool": TOOL_NAME,
            "tool_version": __version__,
            "command_line": " ".join(command_line) or " ".join(sys.argv),
        }
        if sample_frequency_hz:
            self._metadata["cpu_sample_frequency_hz"] = sample_frequency_hz
        self._producers: list[Producer] = []
        self.descriptor_seq_id = self._next_seq_id()
        self._write_clock_snapshot(clock_snapshot)
        self.tracks = _Tracks(self)

    # -- public API ---------------------------------------------------------------------
    def producer(self, name: str) -> Producer:
        prod = Producer(self, name, self._next_seq_id())
        self._producers.append(prod)
        return prod

    def set_metadata(self, key: str, value: model.ArgValue) -> None:
        self._metadata[key] = value

    def close(self) -> Path:
        """Flush everything, write the metadata, and move the file into place."""
        if self._file is None:
            return self.path
        for prod in self._producers:
            prod.flush()
        self._write_metadata()
        self._flush_buffer()
        self._file.close()
        self._file = None
        os.replace(self.tmp_path, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the partial file: nothing half-written is left under any name."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- internals ----------------------------------------------------------------------
    def note_ts(self, ts: int) -> None:
        if self.min_ts is None or ts < self.min_ts:
            self.min_ts = ts

    def _next_seq_id(self) -> int:
        self._seq_counter += 1
        return self._seq_counter

    def _emit(self, pkt: pb.TracePacket) -> None:
        data = _frame_packet(pkt.SerializeToString())
        self._buffer.append(data)
        self._buffered += len(data)
        if self._buffered >= 1 << 20:
            self._flush_buffer()

    def _flush_buffer(self) -> None:
        """Write buffered packets, deflated into one `compressed_packets` packet.

        trace_processor inflates these transparently; deflate on top of interning and
        varints is what makes the trace several times smaller than gzipped JSON.
        """
        if self._file is None or not self._buffer:
            return
        chunk = b"".join(self._buffer)
        if self.compression_level > 0:
            wrapper = pb.TracePacket()
            wrapper.compressed_packets = zlib.compress(chunk, self.compression_level)
            chunk = _frame_packet(wrapper.SerializeToString())
        self._file.write(chunk)
        self.bytes_written += len(chunk)
        self._buffer.clear()
        self._buffered = 0

    def _write_clock_snapshot(self, snapshot: Mapping[int, int] | None) -> None:
        if snapshot is None:
            if self.clock_id != pb.BUILTIN_CLOCK_BOOTTIME:
                snapshot = capture_clock_snapshot()
            else:
                snapshot = {pb.BUILTIN_CLOCK_BOOTTIME: 0}
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self.descriptor_seq_id
        pkt.clock_snapshot.primary_trace_clock = pb.BUILTIN_CLOCK_BOOTTIME
        for clock, reading in snapshot.items():
            pkt.clock_snapshot.clocks.add(clock_id=clock, timestamp=reading)
        self._emit(pkt)

    def _write_metadata(self) -> None:
        """One instant on an `xpu-perf` track whose args are the run's facts and counters."""
        for key, value in self.counts.items():
            self._metadata.setdefault(f"writer.{key}", value)
        uuid = self.tracks._uuid()
        desc = pb.TrackDescriptor(uuid=uuid, name=TOOL_NAME)
        self.tracks._descriptor(desc)
        seq = _Sequence(self, self._next_seq_id())
        pkt, _ = seq.track_event(
            self._first_ts_hint(),
            _TYPE_INSTANT,
            uuid,
            "xpu-perf metadata",
            METADATA_CATEGORY,
            self._metadata.items(),
        )
        seq.flush_interned(pkt)
        self._emit(pkt)

    def _first_ts_hint(self) -> int:
        # The metadata instant only needs a timestamp inside the trace's time range.
        return self.min_ts if self.min_ts is not None else 0


def capture_clock_snapshot() -> dict[int, int]:
    """Readings of the clocks trace_processor can convert between, taken back to back."""
    return {
        pb.BUILTIN_CLOCK_BOOTTIME: time.clock_gettime_ns(time.CLOCK_BOOTTIME),
        pb.BUILTIN_CLOCK_MONOTONIC: time.clock_gettime_ns(time.CLOCK_MONOTONIC),
        pb.BUILTIN_CLOCK_REALTIME: time.time_ns(),
    }
