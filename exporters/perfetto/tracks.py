"""Tracks and lanes: the uuid and TrackDescriptor of every track the writer uses.

- a process track per pid and a thread track per (pid, tid), named from ProcessInfo and
  ThreadInfo: a later thread name re-describes the thread's track; a process is described
  with its last name once, at the end (trace_processor keeps a process's first name);
- `GPU D (<name>)` root tracks, each with one `Stream N` child per stream;
- counter tracks of a GPU (hardware counters, device memory in use) under its track, below
  its streams (the GPU's work first; ~20 counters above them pushed the streams off screen);
- lanes: slices that overlap on one thread or stream without nesting go to sibling tracks
  (lanes.py places them); a thread's extra lanes are children of its track, a stream's are
  more `Stream N` tracks under the GPU's.
Descriptors go on the descriptor sequence as the tracks are first used.
"""

from __future__ import annotations

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto.chunks import ChunkBuffer
from exporters.perfetto.lanes import LaneSet

_INT32_MIN = -(1 << 31)
_INT32_MAX = (1 << 31) - 1
# Children of a GPU track rank (sibling_order_rank, an int32; equal ranks come out in no set
# order) as: streams by their id, then ops on no stream and stream ids from here up, then the
# counters in the order they were first used.  The room above is far more than the counters
# of any GPU (collector/gpu_metrics/catalog.py has ~20).
_LAST_STREAM_RANK = _INT32_MAX - (1 << 16)


def _stream_rank(stream: int) -> int:
    if stream in model.NO_STREAM_IDS or not _INT32_MIN <= stream < _LAST_STREAM_RANK:
        return _LAST_STREAM_RANK
    return stream


def _stream_name(stream: int) -> str:
    return "no stream" if stream in model.NO_STREAM_IDS else f"Stream {stream}"


class Tracks:
    """Track uuids and descriptors: processes, threads (+ lanes), GPUs, streams (+ lanes)."""

    def __init__(self, chunks: ChunkBuffer, descriptor_seq_id: int, counts: dict[str, int]) -> None:
        self._chunks = chunks
        self._descriptor_seq_id = descriptor_seq_id
        self._counts = counts  # the writer's counters: extra_lanes
        self._next_uuid = 1
        self._processes: dict[int, int] = {}
        # pid -> (name, cmdline, labels), described by finish()
        self._process_facts: dict[int, tuple[str | None, tuple[str, ...], tuple[str, ...]]] = {}
        self._threads: dict[tuple[int, int], int] = {}
        self._thread_names: dict[tuple[int, int], str] = {}
        self._thread_lanes: dict[tuple[int, int], tuple[LaneSet, list[int]]] = {}
        self._gpus: dict[int, int] = {}
        self._gpu_names: dict[int, str] = {}
        self._stream_lanes: dict[tuple[int, int], tuple[LaneSet, list[int]]] = {}
        self._gpu_counters: dict[tuple[int, str], int] = {}

    def _uuid(self) -> int:
        uuid = self._next_uuid
        self._next_uuid += 1
        return uuid

    def _descriptor(self, fill: pb.TrackDescriptor) -> None:
        pkt = pb.TracePacket()
        pkt.trusted_packet_sequence_id = self._descriptor_seq_id
        pkt.track_descriptor.CopyFrom(fill)
        self._chunks.emit(pkt)

    def named(self, name: str) -> int:
        """A root track with only a name (the metadata instant's)."""
        uuid = self._uuid()
        self._descriptor(pb.TrackDescriptor(uuid=uuid, name=name))
        return uuid

    def child(self, parent: int, name: str) -> int:
        """A named track under `parent` (the capture windows under the `xpu-perf` track)."""
        uuid = self._uuid()
        self._descriptor(pb.TrackDescriptor(uuid=uuid, parent_uuid=parent, name=name))
        return uuid

    def process(
        self,
        pid: int,
        name: str | None = None,
        cmdline: tuple[str, ...] = (),
        labels: tuple[str, ...] = (),
    ) -> int:
        """The process's track.  Its name, command line and labels are noted (the last given
        wins) and described once, by finish(): trace_processor keeps a process's first name,
        and a process learns its final name late (after an exec, or from what its samples
        show it runs: collector/process_names.py)."""
        uuid = self._processes.get(pid)
        if uuid is None:
            uuid = self._processes[pid] = self._uuid()
            # Only the pid now: threads need the track as their parent.
            desc = pb.TrackDescriptor(uuid=uuid)
            desc.process.pid = pid
            self._descriptor(desc)
        if name or cmdline or labels:
            old_name, old_cmdline, old_labels = self._process_facts.get(pid, (None, (), ()))
            self._process_facts[pid] = (
                name or old_name,
                cmdline or old_cmdline,
                labels or old_labels,
            )
        return uuid

    def finish(self) -> None:
        """Describe every process with its last name, command line and labels."""
        for pid, (name, cmdline, labels) in self._process_facts.items():
            desc = pb.TrackDescriptor(uuid=self._processes[pid])
            desc.process.pid = pid
            if name:
                desc.process.process_name = name
            if cmdline:
                desc.process.cmdline.extend(cmdline)
            if labels:
                # The one free-form field of a ProcessDescriptor that trace_processor keeps
                # (as the process's args) and the UI shows in the process's details.
                desc.process.process_labels.extend(labels)
            self._descriptor(desc)
        self._process_facts.clear()

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
                self._describe_lane(lane_uuid, uuid, name)
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

    def _describe_lane(self, uuid: int, thread_uuid: int, name: str | None) -> None:
        """An extra lane of a thread: a child of the thread's own track, so trace_processor
        keeps it on the thread (same utid; a lane with its own thread descriptor got a utid
        of its own), and never merged with its siblings (slices of different lanes would
        then close each other)."""
        desc = pb.TrackDescriptor(uuid=uuid, parent_uuid=thread_uuid)
        if name:
            desc.name = name
        desc.sibling_merge_behavior = pb.TrackDescriptor.SIBLING_MERGE_BEHAVIOR_NONE
        self._descriptor(desc)

    def thread_lane(self, pid: int, tid: int, ts: int, dur: int) -> int:
        lane_set, uuids = self.thread_lanes(pid, tid)
        index = lane_set.place(ts, dur)
        return uuids[index] if index < len(uuids) else self.add_thread_lanes(pid, tid, index)

    def thread_lanes(self, pid: int, tid: int) -> tuple[LaneSet, list[int]]:
        """The thread's lanes and their track uuids (the thread's own track first)."""
        entry = self._thread_lanes.get((pid, tid))
        if entry is None:
            entry = self._thread_lanes[(pid, tid)] = (LaneSet(), [self.thread(pid, tid, None)])
        return entry

    def add_thread_lanes(self, pid: int, tid: int, index: int) -> int:
        """Tracks for lanes up to `index`: another track of the same thread (same
        pid/tid/name) per lane."""
        uuids = self.thread_lanes(pid, tid)[1]
        while index >= len(uuids):
            lane_uuid = self._uuid()
            self._describe_lane(lane_uuid, uuids[0], self._thread_names.get((pid, tid)))
            uuids.append(lane_uuid)
            self._counts["extra_lanes"] += 1
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
        desc.sibling_order_rank = device if _INT32_MIN <= device <= _INT32_MAX else _INT32_MAX
        self._descriptor(desc)
        return uuid

    def gpu_counter(self, device: int, name: str, unit: str) -> int:
        """The counter track `name` under GPU `device`'s track (created at first use).
        Counter tracks sort below the streams, in the order they were first used (a
        source writes them in its catalog's order)."""
        key = (device, name)
        uuid = self._gpu_counters.get(key)
        if uuid is not None:
            return uuid
        uuid = self._gpu_counters[key] = self._uuid()
        desc = pb.TrackDescriptor(uuid=uuid, parent_uuid=self.gpu_device(device, None), name=name)
        desc.counter.unit_name = unit
        # After every stream (_stream_rank), in first-use order.
        desc.sibling_order_rank = _LAST_STREAM_RANK + min(len(self._gpu_counters), 1 << 16)
        self._descriptor(desc)
        return uuid

    def stream_lane(self, device: int, stream: int, ts: int, dur: int) -> int:
        lane_set, uuids = self.stream_lanes(device, stream)
        index = lane_set.place(ts, dur)
        return uuids[index] if index < len(uuids) else self.add_stream_lanes(device, stream, index)

    def stream_lanes(self, device: int, stream: int) -> tuple[LaneSet, list[int]]:
        """The stream's lanes and their track uuids (created with the first op)."""
        entry = self._stream_lanes.get((device, stream))
        if entry is None:
            entry = self._stream_lanes[(device, stream)] = (LaneSet(), [])
        return entry

    def add_stream_lanes(self, device: int, stream: int, index: int) -> int:
        """Tracks for lanes up to `index`: `Stream N` tracks under the GPU's."""
        uuids = self.stream_lanes(device, stream)[1]
        while index >= len(uuids):
            lane_uuid = self._uuid()
            desc = pb.TrackDescriptor(
                uuid=lane_uuid, parent_uuid=self.gpu_device(device, None), name=_stream_name(stream)
            )
            # Ops on no stream (Kineto: 2**32-1 or -1) and ids past the streams' ranks sort
            # after the other streams, before the counters.
            desc.sibling_order_rank = _stream_rank(stream)
            self._descriptor(desc)
            uuids.append(lane_uuid)
            if len(uuids) > 1:
                self._counts["extra_lanes"] += 1
        return uuids[index]
