"""Rewriting the packets of one input trace so that many can share one merged trace.

What would collide between traces of different nodes or ranks, and how each is kept apart:
- trusted_packet_sequence_id: each input sequence gets a new id of the merged trace, so
  its interned data and its sequence-scoped incremental clocks stay its own;
- track uuids and flow ids (trace-global): a keyed bijection per input (`KeyedIds`): ids of
  one input stay distinct (a flow id the writer recycles is recycled alike), and ids of two
  inputs meet only by a 64-bit hash collision (about n**2 / 2**65 for n ids);
- pids and tids (trace_processor merges processes by pid): `ProcessIds` keeps an id where
  no earlier input used it, else moves it by multiples of 2**22 (Linux's pid_max);
- hosts: each process gets a `host=NAME` label (shown as its args; view xpu_process), and
  each root track that is not a process (`GPU D (<name>)`, `xpu-perf`) the input's label;
- time: timestamps in builtin clocks are converted into the input's BOOTTIME and moved by
  the input's offset (`InputClock`); the input's own clock snapshot is replaced by the
  merged trace's; the sequence-scoped snapshots defining incremental clocks are rebased,
  so the deltas on those clocks need no rewriting;
- metadata: the input's `xpu-perf metadata` instant keeps every arg under `inputN.` names,
  so the merged trace's own metadata (the merge's facts) is not mixed with them.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

_M64 = (1 << 64) - 1
BOOTTIME = pb.BUILTIN_CLOCK_BOOTTIME
MONOTONIC = pb.BUILTIN_CLOCK_MONOTONIC
# Launch stacks (exporters/perfetto/launch_stacks.py) are counted as the perf samples of
# this timebase were before they became StreamingProfilePackets.
LAUNCH_STACK_COUNT = "samples.xpu_perf.launch_stack"
_SCOPED_CLOCKS = range(64, 128)  # sequence-scoped clock ids
_METADATA = "xpu_perf_metadata"
_WINDOW = "xpu_perf_window"
_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_INSTANT = pb.TrackEvent.TYPE_INSTANT
_FLOW_FIELDS = ("flow_ids", "terminating_flow_ids", "flow_ids_old", "terminating_flow_ids_old")
_WINDOW_TRACK = re.compile(r"^capture windows \(pid (\d+)\)$")
# Linux pids and tids are below 2**22 (pid_max's ceiling); ids of the int32 fields wrap
# into [1, 2**31).
PID_SPACE = 1 << 22
_PID_LIMIT = 1 << 31


class MergeInputError(Exception):
    """An input packet the merge cannot place in the merged trace; one line for the user."""


def _mix(x: int) -> int:
    """splitmix64's finalizer: a bijection of 64-bit ints that spreads every input bit."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


class KeyedIds:
    """x -> mix(x ^ key): one bijection per (input, kind of id); 0 (no id) stays 0."""

    def __init__(self, input_index: int, kind: int) -> None:
        self._key = _mix((input_index << 8 | kind) + 0x9E3779B97F4A7C15 & _M64)
        self._cache: dict[int, int] = {}

    def __call__(self, x: int) -> int:
        if x == 0:
            return 0
        out = self._cache.get(x)
        if out is None:
            out = _mix(x ^ self._key)
            if len(self._cache) < 1 << 16:  # tracks repeat, flow ids mostly not
                self._cache[x] = out
        return out


class ProcessIds:
    """Output pids/tids of every input: one id space for both (a tid is a pid on Linux, and
    trace_processor ties a thread whose tid is a process's pid to that process)."""

    def __init__(self) -> None:
        self._used: set[int] = set()

    def for_input(self) -> InputProcessIds:
        return InputProcessIds(self._used)


class InputProcessIds:
    """One input's id -> output id: the id itself unless an earlier input (or this one,
    moved) took it; then id + k * 2**22 (negative ids: - k * 2**22) for the smallest free k,
    within int32.  0 stays 0."""

    def __init__(self, used: set[int]) -> None:
        self._used = used
        self._map: dict[int, int] = {}
        self.moved = 0

    def __call__(self, pid: int) -> int:
        out = self._map.get(pid)
        if out is not None:
            return out
        if pid == 0:
            out = 0  # no process (trace_processor's swapper/idle)
        else:
            # Negative ids (Kineto's -1 "process" of profiler overhead) move downwards.
            sign, magnitude = (1, pid) if pid > 0 else (-1, -pid)
            out, k = pid, 0
            while out in self._used:
                k += 1
                out = sign * ((magnitude + k * PID_SPACE) % _PID_LIMIT or PID_SPACE)
            self._used.add(out)
            self.moved += out != pid
        self._map[pid] = out
        return out

    def mapping(self) -> dict[int, int]:
        """The ids that moved."""
        return {k: v for k, v in self._map.items() if k != v}


@dataclass(frozen=True)
class InputClock:
    """How an input's timestamps become the merged trace's (BOOTTIME domain): a time in a
    builtin clock is first read in the input's BOOTTIME through the input's own snapshot
    (what trace_processor shows for the input alone), then moved by `offset_ns`."""

    snapshot: Mapping[int, int]  # the input's clock snapshot ({} where it has none)
    offset_ns: int

    def to_output(self, clock: int, ts: int) -> int:
        if clock != BOOTTIME:
            if clock not in self.snapshot or BOOTTIME not in self.snapshot:
                raise MergeInputError(
                    f"a timestamp in clock {clock}, which the input's clock snapshot does not "
                    "relate to BOOTTIME"
                )
            ts += self.snapshot[BOOTTIME] - self.snapshot[clock]
        out = ts + self.offset_ns
        if out < 0:
            raise MergeInputError(f"a timestamp moves before 0 ({out} ns)")
        return out


class PacketRemapper:
    """Rewrites the packets of input `index`, one at a time (see the module doc)."""

    def __init__(
        self,
        index: int,
        clock: InputClock,
        pids: InputProcessIds,
        new_sequence_id: Callable[[], int],
        host: str | None,
        label: str,
    ) -> None:
        self.index = index
        self.clock = clock
        self.pids = pids
        self._new_sequence_id = new_sequence_id
        self._host = host or label
        self._label = label
        self._prefix = f"input{index}."
        self._uuids = KeyedIds(index, 1)
        self._flows = KeyedIds(index, 2)
        self._sequences: dict[int, int] = {}
        self._default_clock: dict[int, int] = {}  # sequence -> its default timestamp clock
        self._timebase: dict[int, str] = {}  # sample sequence -> its perf timebase name
        # Launch-stack sequence -> the ns its samples move by beyond whole microseconds
        # (their reference time is in us; the ns rest rides in process_priority).
        self._profile_rest: dict[int, int] = {}
        self.counts: Counter[str] = Counter()

    def rewrite(self, raw: bytes) -> bytes | None:
        """The packet for the merged trace, or None for a packet it replaces (the input's
        own clock snapshot; counted)."""
        packet = pb.TracePacket.FromString(raw)
        counts = self.counts
        counts["packets_in"] += 1
        seq = packet.trusted_packet_sequence_id
        if seq:
            out_seq = self._sequences.get(seq)
            if out_seq is None:
                out_seq = self._sequences[seq] = self._new_sequence_id()
            packet.trusted_packet_sequence_id = out_seq
        if packet.HasField("trace_packet_defaults"):
            self._defaults(seq, packet.trace_packet_defaults)
        kind = packet.WhichOneof("data")
        if kind == "clock_snapshot":
            if not self._clock_snapshot(packet.clock_snapshot):
                counts["clock_snapshots_replaced"] += 1
                return None
        elif kind == "track_event":
            self._track_event(packet.track_event)
        elif kind == "track_descriptor":
            self._track_descriptor(packet.track_descriptor)
        elif kind == "perf_sample":
            sample = packet.perf_sample
            sample.pid = self.pids(sample.pid)
            sample.tid = self.pids(sample.tid)
            counts[f"samples.{self._timebase.get(seq, 'other')}"] += 1
        elif kind == "thread_descriptor":
            self._thread_descriptor(seq, packet.thread_descriptor)
        elif kind == "streaming_profile_packet":
            profile = packet.streaming_profile_packet
            rest = self._profile_rest.get(seq, 0)
            if rest:
                profile.process_priority += rest
            counts[LAUNCH_STACK_COUNT] += len(profile.callstack_iid)
        elif kind is not None and kind != "interned_data":
            counts[f"other_packets.{kind}"] += 1
        if packet.HasField("timestamp"):
            clock = (
                packet.timestamp_clock_id
                if packet.HasField("timestamp_clock_id")
                else self._default_clock.get(seq, BOOTTIME)
            )
            if clock not in _SCOPED_CLOCKS:
                # Incremental clocks need nothing: their snapshots are rebased.
                packet.timestamp = self.clock.to_output(clock, packet.timestamp)
                packet.timestamp_clock_id = BOOTTIME
        counts["packets_out"] += 1
        return packet.SerializeToString()

    def _defaults(self, seq: int, defaults: pb.TracePacketDefaults) -> None:
        if defaults.HasField("timestamp_clock_id"):
            self._default_clock[seq] = defaults.timestamp_clock_id
        if defaults.HasField("perf_sample_defaults"):
            self._timebase[seq] = defaults.perf_sample_defaults.timebase.name or "unnamed"
        event_defaults = defaults.track_event_defaults
        if event_defaults.HasField("track_uuid"):
            event_defaults.track_uuid = self._uuids(event_defaults.track_uuid)

    def _thread_descriptor(self, seq: int, descriptor: pb.ThreadDescriptor) -> None:
        """A launch-stack sequence's thread and reference time: trace_processor reads the
        time as CLOCK_MONOTONIC, which the merged trace's snapshot gives as BOOTTIME's
        twin, so the input's MONOTONIC microseconds become output ns, split into whole
        microseconds and a rest that every sample of the sequence adds."""
        descriptor.pid = self.pids(descriptor.pid)
        descriptor.tid = self.pids(descriptor.tid)
        if descriptor.HasField("reference_timestamp_us"):
            out = self.clock.to_output(MONOTONIC, descriptor.reference_timestamp_us * 1000)
            descriptor.reference_timestamp_us, self._profile_rest[seq] = divmod(out, 1000)

    def _clock_snapshot(self, snapshot: pb.ClockSnapshot) -> bool:
        """Rebase a sequence's snapshot (incremental clocks against the trace clock): its
        builtin-clock readings move into the merged trace's time.  False for the input's
        own snapshot of builtin clocks, which the merged trace's replaces."""
        if not any(c.clock_id in _SCOPED_CLOCKS for c in snapshot.clocks):
            return False
        for c in snapshot.clocks:
            if c.clock_id < 64:
                c.timestamp = self.clock.to_output(c.clock_id, c.timestamp)
                c.clock_id = BOOTTIME
        return True

    def _track_event(self, event: pb.TrackEvent) -> None:
        counts = self.counts
        if event.HasField("track_uuid"):
            event.track_uuid = self._uuids(event.track_uuid)
        if event.type == _BEGIN:
            counts["slices"] += 1
        elif event.type == _INSTANT:
            counts["instants"] += 1
        flows = self._flows
        for field in _FLOW_FIELDS:
            ids = getattr(event, field)
            if ids:
                counts[field] += len(ids)
                ids[:] = [flows(i) for i in ids]
        if event.extra_counter_track_uuids:
            event.extra_counter_track_uuids[:] = [
                self._uuids(u) for u in event.extra_counter_track_uuids
            ]
        categories = event.categories  # inline only: the writer's metadata and windows
        if categories:
            if _METADATA in categories:
                counts["metadata_instants"] += 1
                for annotation in event.debug_annotations:
                    if annotation.name:
                        annotation.name = self._prefix + annotation.name
            elif _WINDOW in categories:
                for annotation in event.debug_annotations:
                    if annotation.name == "pid" and annotation.HasField("int_value"):
                        annotation.int_value = self.pids(annotation.int_value)

    def _track_descriptor(self, desc: pb.TrackDescriptor) -> None:
        self.counts["track_descriptors"] += 1
        desc.uuid = self._uuids(desc.uuid)
        if desc.HasField("parent_uuid"):
            desc.parent_uuid = self._uuids(desc.parent_uuid)
        if desc.HasField("process"):
            process = desc.process
            process.pid = self.pids(process.pid)
            # Labels are kept by trace_processor as the process's args; the UI shows them.
            process.process_labels.append(f"host={self._host}")
        elif desc.HasField("thread"):
            desc.thread.pid = self.pids(desc.thread.pid)
            desc.thread.tid = self.pids(desc.thread.tid)
        elif desc.name:
            window = _WINDOW_TRACK.match(desc.name)
            if window is not None:
                desc.name = f"capture windows (pid {self.pids(int(window.group(1)))})"
            elif not desc.HasField("parent_uuid"):
                # GPU devices and the xpu-perf track: one per input, told apart by name.
                desc.name = f"{desc.name} [{self._label}]"
