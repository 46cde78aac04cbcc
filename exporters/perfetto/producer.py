"""Producer: where one source's events enter the writer (TraceWriter.producer(name)).

It sends each event to the code that encodes it:
- CpuSlice / GpuOp: buffered in a reorder window of REORDER_WINDOW slices, then sorted
  and encoded by the object path (object_path.write_slices);
- SliceBatch (the CUPTI source's columns): the columnar path (batch_writer.write_batch);
- CpuSample, Instant: object_path.write_sample / write_instant, as they come;
- WaitStack: launch_stacks.write_wait_stack, on the thread's wait-stack sequence;
- ProcessInfo, ThreadInfo, GpuDevice: track descriptors (tracks.py);
- GpuCounterSeries: counters.write_counter_series, on the GPU's counter track.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import replace
from itertools import compress, count, islice
from operator import attrgetter, eq

from collector import model
from exporters.perfetto import batch_writer, counters, launch_stacks, object_path
from exporters.perfetto.producer_state import ProducerState
from exporters.perfetto.sequences import CPU_SAMPLE_TIMEBASE
from exporters.perfetto.trace_state import TraceState

# Slices are buffered and placed on lanes in start order in windows of this size; a
# slice that arrives later than the window still lands safely (see lanes.py).
REORDER_WINDOW = 65536
# A window with more slices than this before the sequence's clock gets a new sequence.
LATE_SLICES = 256
_GpuOp = model.GpuOp
_CpuSlice = model.CpuSlice
_BY_TS = attrgetter("ts")
_BY_DUR = attrgetter("dur")


def with_launch_stack_arg(event: model.CpuSlice) -> model.CpuSlice:
    """An API call with its launch stack's frames as arg `debug.launch_stack`, what the UI
    shows in the slice's details (launch_stacks.py)."""
    args = {**event.args, launch_stacks.ARG_KEY: launch_stacks.stack_text(event.launch_stack)}
    return replace(event, args=args)


class Producer(ProducerState):
    """Writes the events of one source (cupti, ebpf, kineto...) on its own sequences."""

    def __init__(self, trace: TraceState, name: str, seq_id: int, index: int) -> None:
        self._pending: list[model.CpuSlice | model.GpuOp] = []
        super().__init__(trace, name, seq_id, index)

    def write(self, event: model.Event) -> None:
        if isinstance(event, (model.CpuSlice, model.GpuOp)):
            if type(event) is _CpuSlice and event.launch_stack is not None:
                event = with_launch_stack_arg(event)
            self._pending.append(event)
            if len(self._pending) >= REORDER_WINDOW:
                self.flush()
        elif isinstance(event, model.CpuSample):
            object_path.write_sample(
                self, event.pid, event.tid, event.ts, event.stack, CPU_SAMPLE_TIMEBASE, event.cpu
            )
        elif isinstance(event, model.ThreadInfo):
            self.trace.tracks.thread(event.pid, event.tid, event.name)
        elif isinstance(event, model.ProcessInfo):
            self.trace.tracks.process(
                event.pid, event.name, event.cmdline, tuple(f"{k}={v}" for k, v in event.args)
            )
        elif isinstance(event, model.GpuDevice):
            self.trace.tracks.gpu_device(event.device, event.name)
        elif isinstance(event, model.Instant):
            object_path.write_instant(self, event)
        elif isinstance(event, model.WaitStack):
            launch_stacks.write_wait_stack(self.trace, self.wait_threads, event)
        elif isinstance(event, model.SliceBatch):
            self.flush()  # the object slices so far go first
            batch_writer.write_batch(self, event)
        elif isinstance(event, model.GpuCounterSeries):
            counters.write_counter_series(self.trace, event)
        else:
            raise TypeError(f"not a trace event: {event!r}")

    def write_all(self, events: Iterable[model.Event]) -> None:
        pending = self._pending
        room = REORDER_WINDOW - len(pending)
        for event in events:
            kind = type(event)
            if kind is _GpuOp or kind is _CpuSlice:
                if kind is _CpuSlice and event.launch_stack is not None:  # type: ignore[union-attr]
                    event = with_launch_stack_arg(event)  # type: ignore[arg-type]
                pending.append(event)  # type: ignore[arg-type]
                room -= 1
                if room <= 0:
                    self.flush()
                    pending = self._pending
                    room = REORDER_WINDOW
            else:
                self.write(event)
                # A SliceBatch flushed the slices so far into a fresh list: append to that.
                pending = self._pending
                room = REORDER_WINDOW - len(pending)

    def flush(self) -> None:
        """Place buffered slices on lanes in start order and write their BEGINs (and the
        ENDs that are due before them)."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        # Start order, the longer of two slices starting together first (it becomes the
        # parent).  Sorting by start alone is a C-level key; only the runs of slices that
        # start together are sorted again, longest first (stable sorts: the order of the
        # key (ts, -dur), without a Python key call per slice).
        pending.sort(key=_BY_TS)
        starts = [e.ts for e in pending]
        together = list(compress(count(), map(eq, starts, islice(starts, 1, None))))
        if together:
            _longest_first(pending, together)
        if bisect_left(starts, self.latest) > LATE_SLICES:
            # This window goes back in time (sources that write in no time order, such as
            # Kineto's JSON): rather than absolute timestamps for its slices, a new
            # sequence with a clock of its own, once the open slices are ended (ENDs that
            # are written early still sort into place in trace_processor).
            object_path.end_until(self, None)
            self.start_sequence(self.trace.next_seq_id())
            self.flows.new_sequence()
        object_path.write_slices(self, pending)
        self.trace.counts["slices"] += len(pending)
        self.trace.note_ts(pending[0].ts)

    def finish(self) -> None:
        """Write everything still buffered, ENDs included (the producer is done)."""
        self.flush()
        object_path.end_until(self, None)


def _longest_first(pending: list[model.CpuSlice | model.GpuOp], together: list[int]) -> None:
    """Sort each run of slices with one start by duration, longest first; `together`
    holds every i (ascending) where slice i starts with slice i + 1."""
    first = last = together[0]
    for i in together[1:]:
        if i != last + 1:
            pending[first : last + 2] = sorted(pending[first : last + 2], key=_BY_DUR, reverse=True)
            first = i
        last = i
    pending[first : last + 2] = sorted(pending[first : last + 2], key=_BY_DUR, reverse=True)
