"""Producer: where one source's events enter the writer (TraceWriter.producer(name)).

It sends each event to the code that encodes it:
- SliceBatch (slices only come in batches: the CUPTI and Kineto columns, waits, probe
  hits): batch_writer.write_batch;
- CpuSample, Instant: point_events.write_sample / write_instant, as they come;
- WaitStack: launch_stacks.write_wait_stack, on the thread's wait-stack sequence;
- ProcessInfo, ThreadInfo, GpuDevice: track descriptors (tracks.py);
- GpuCounterSeries: counters.write_counter_series, on the GPU's counter track.
"""

from __future__ import annotations

from collections.abc import Iterable

from collector import model
from exporters.perfetto import batch_writer, counters, launch_stacks, point_events
from exporters.perfetto.producer_state import ProducerState
from exporters.perfetto.sequences import CPU_SAMPLE_TIMEBASE


class Producer(ProducerState):
    """Writes the events of one source (cupti, ebpf, kineto...) on its own sequences."""

    def write(self, event: model.Event) -> None:
        if isinstance(event, model.SliceBatch):
            batch_writer.write_batch(self, event)
        elif isinstance(event, model.CpuSample):
            point_events.write_sample(
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
            point_events.write_instant(self, event)
        elif isinstance(event, model.WaitStack):
            launch_stacks.write_wait_stack(self.trace, self.wait_threads, event)
        elif isinstance(event, model.GpuCounterSeries):
            counters.write_counter_series(self.trace, event)
        elif isinstance(event, (model.CpuSlice, model.GpuOp)):
            raise TypeError(f"slices reach the writer as a SliceBatch, not one by one: {event!r}")
        else:
            raise TypeError(f"not a trace event: {event!r}")

    def write_all(self, events: Iterable[model.Event]) -> None:
        write = self.write
        for event in events:
            write(event)
