"""Launch stacks: the call stack of each CUDA API call, kept apart from the CPU samples.

trace_processor v52 does not read a TrackEvent's callstack, and the v52 UI's CPU
flamegraph (process or thread selected, or an area) counts every `perf_sample` row with a
callsite: launch stacks written as perf samples (one per API call, not per unit of time)
swamped the CPU profile.  So a launch stack is written twice, each for one reader:

- its frames, as text, on the API slice: arg `debug.launch_stack` (innermost frame first,
  ` <- ` between frames, as users read them: the filters of collector/frames.py and short
  C++ names), shown in the UI's details of the API slice, and of a GPU op's API call
  through its flow;
- its callsite, as a StreamingProfilePacket sample on a sequence of the calling thread
  (trace_processor: `cpu_profile_stack_sample`), which the UI shows as a track of its own
  per thread ("<thread> (CPU Stack Samples)"; a click shows that call's stack) and never
  adds to the perf-sample flamegraph.  SQL reads it as `xpu_launch_stack` (xpu_views.sql).

The packet's encoding sets what we must do: its thread is the sequence's ThreadDescriptor
(one sequence per thread: a second descriptor on a sequence re-labels all its samples), and
its time is the descriptor's reference plus microsecond deltas, read as CLOCK_MONOTONIC.  A
launch stack must have the exact ns time of its API slice (that is how SQL pairs them), so
the sub-microsecond rest travels in the packet's `process_priority` (0..999, otherwise
unused by our traces) and the view adds it back.

The stack at the entry of a blocking call (a `wait` slice, model.WaitStack) is written the
same way on a sequence of its own per thread, its `process_priority` raised by
WAIT_STACK_MARK: `xpu_launch_stack` keeps the rows below the mark, `xpu_wait` pairs those
above it with their slice (xpu_views.sql).  `merge` adds at most 999 to a priority, so the
two ranges stay apart.
"""

from __future__ import annotations

from collections.abc import Sequence as Seq
from functools import lru_cache

from collector import frames, model
from collector.frame_names import short_name
from exporters.perfetto import wire
from exporters.perfetto.sequences import Sequence
from exporters.perfetto.trace_state import TraceState

_STREAMING_PROFILE_TAG = wire.key(wire.PACKET_STREAMING_PROFILE, wire.LEN)
# What the arg shows at most: a deep native stack under a Python frame (libtorch -> cuBLAS)
# is still whole at 64 frames; the trace's callsite keeps every frame.
ARG_FRAMES = 64
ARG_KEY = "launch_stack"
# Added to a wait stack's process_priority (xpu_views.sql reads the same number).
WAIT_STACK_MARK = 1_000_000


class LaunchStackThread:
    """One thread's launch-stack sequence and its microsecond clock."""

    def __init__(self, trace: TraceState, pid: int, tid: int, first_ts: int, mark: int = 0) -> None:
        self.reference_us = (first_ts + trace.monotonic_offset) // 1000
        self.seq = Sequence(trace, trace.next_seq_id(), thread=(pid, tid, self.reference_us))
        self.last_us = self.reference_us
        self.offset = trace.monotonic_offset
        self.mark = mark  # 0: launch stacks; WAIT_STACK_MARK: wait stacks

    def packet(self, ts: int, stack: model.Stack) -> bytes:
        """The framed StreamingProfilePacket of one launch stack at `ts` (trace clock)."""
        seq = self.seq
        mono = ts + self.offset
        us, rest = divmod(mono, 1000)
        body = (
            wire.varint_field(wire.PROFILE_CALLSTACK_IID, seq.callstack_iid(stack))
            + wire.varint_field(wire.PROFILE_TIMESTAMP_DELTA_US, us - self.last_us)
            + wire.varint_field(wire.PROFILE_PROCESS_PRIORITY, rest + self.mark)
        )
        self.last_us = us
        return wire.frame(
            seq.head_needs
            + _STREAMING_PROFILE_TAG
            + wire.varint(len(body))
            + body
            + (seq.interned_field() if seq.dirty else b"")
        )


def write_launch_stacks(
    trace: TraceState,
    threads: dict[tuple[int, int], LaunchStackThread],
    pid: int,
    tid: int,
    times: Seq[int],
    stacks: Seq[model.Stack],
) -> None:
    """One thread's launch stacks (times in time order) into the current chunk."""
    if not len(times):
        return
    thread = threads.get((pid, tid))
    if thread is None:
        thread = threads[(pid, tid)] = LaunchStackThread(trace, pid, tid, int(times[0]))
    chunks = trace.chunks
    for ts, stack in zip(times, stacks, strict=True):
        chunks.emit_bytes(thread.packet(int(ts), stack))
    trace.counts["launch_stacks"] += len(times)


def write_wait_stack(
    trace: TraceState,
    threads: dict[tuple[int, int], LaunchStackThread],
    event: model.WaitStack,
) -> None:
    """The stack at a wait's entry, on the thread's wait-stack sequence."""
    key = (event.pid, event.tid)
    thread = threads.get(key)
    if thread is None:
        thread = threads[key] = LaunchStackThread(
            trace, event.pid, event.tid, event.ts, WAIT_STACK_MARK
        )
    trace.chunks.emit_bytes(thread.packet(event.ts, event.stack))
    trace.counts["wait_stacks"] += 1


# A bounded memo of a pure function of the (immutable) stack: no state kept per trace.
@lru_cache(maxsize=16384)
def stack_text(stack: model.Stack) -> str:
    """The launch stack as the API slice's arg shows it: innermost frame first."""
    # The filters keep a stack's first frame as its thread root: give them one, so the
    # outermost frames (the start-up path, python -m's runner) are judged like the rest.
    rooted = [("", ""), *((f.function, f.module) for f in stack.frames)]
    shown = frames.apply_filters(rooted)[1:]
    names = [short_name(name) for name, _ in reversed(shown)]
    if len(names) > ARG_FRAMES:
        names = [*names[:ARG_FRAMES], f"... {len(names) - ARG_FRAMES} more"]
    return " <- ".join(names)
