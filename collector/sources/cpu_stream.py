"""CPU samples of the in-process sampler (cupti_inject/src/sampler.c, LD_PRELOAD'ed into
every process of the recorded tree): cpu-<pid>.xpstream files -> model.CpuSample.

Stacks are symbolized like launch stacks (the process's own module map, ELF symbols,
demangled) with Python frames spliced in where the interpreter ran them; the first native pc
of a sample is the interrupted instruction itself, not a return address.

Waits (cupti_inject/src/waits.c: blocking calls over the threshold) become `wait` slices
`waiting in <call>` on the thread, arg `call`, each with its stack at entry (model.WaitStack;
the first native pc is the libc function itself).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from collector import model
from collector.sources.cupti import stream_paths, stream_pid
from collector.sources.cupti_launch_stacks import stream_stacks
from collector.sources.cupti_stream import (
    Stream,
    count_unwritten,
    process_events,
    read_streams,
)
from collector.sources.slice_rows import SliceRows
from collector.symbolize import Symbolizer

STREAM_GLOB = "cpu-*.xpstream"
# A kernel sample and the user sample its signal triggered are this close (the signal is
# handled when the thread next returns to user space; a blocking system call ends first).
_JOIN_WINDOW_NS = 1_000_000_000
# Why a walk stopped (enum xp_unwind_end of cupti_inject/src/unwind.h), index = value.
UNWIND_ENDS = ("complete", "no_cfi", "bad_stack", "bad_pc", "max_depth", "no_stack")
# Counters of the library summed over processes (the rest is derived here).
_SUMMED = (
    "cpu_samples_ring_full",
    "cpu_timers_failed",
    "cpu_threads_perf_clock",
    "cpu_threads_posix_timer",
    "cpu_timer_overruns",
    "cpu_threads_sampled",
    "cpu_python_guard_failures",
    "cpu_python_walk_faults",
    "cpu_unwind_fp_steps",
    "cpu_handler_ns",
    "cpu_scanner_ns",
    "cpu_process_ns",
    "cpu_kernel_signals_unmatched",
    "cpu_samples_outside_window",
    "transport_dropped_rows",
    "transport_reopened",  # the stream's descriptor was closed or replaced by the target
    "transport_lost_bytes",  # bytes that could not be written (the file could not reopen)
    "cpu_clocks_restarted",  # perf clocks the target closed, opened again
    "cpu_waits_ring_full",  # waits lost: the thread's ring was full (scanner late)
    "cpu_waits_no_memory",  # waits lost: no memory for the thread's ring
    "cpu_waits_outside_window",  # waits that ended outside every capture window (not kept)
    "cpu_waits_python_faults",  # waits whose Python walk faulted (kept without Python frames)
    "cpu_wait_record_ns",  # time spent recording waits (after the calls returned)
    # Samples and waits kept without their stack: a new stack found the process's stack
    # table at its bound (cupti_inject/src/stack_table.h) or no memory to grow it.
    "cpu_stack_table_full",
    "cpu_wait_stack_table_full",
)


class InprocessCpuSource:
    """Reads every cpu-*.xpstream of a directory; `counts` holds the accounting after
    `events()` is consumed: samples, samples by unwind end, Python coverage, losses."""

    def __init__(
        self,
        directory: Path,
        symbolizer: Symbolizer | None = None,
        kernel_stacks: Mapping[int, Sequence[tuple[int, tuple[model.Frame, ...]]]] | None = None,
    ) -> None:
        """kernel_stacks: tid -> [(ts, kernel frames root first)] in time order, from the eBPF
        kernel-mode sampler (root), joined to the samples its signals triggered."""
        self.directory = directory
        self.symbolizer = symbolizer or Symbolizer()
        self.kernel_stacks = kernel_stacks or {}
        # Read by name in SQL: present when zero too.
        self.counts: Counter[str] = Counter(
            {
                "streams_without_counters": 0,
                "streams_rejected": 0,
                # Rows the library could not write (a full disk): its UNWRITTEN block.
                "unwritten_cpu_samples": 0,
                "unwritten_waits": 0,
                "streams_counters_unwritten": 0,  # final flush ran, its counters not written
            }
        )
        # 'pid N (name)' of each process whose stream has no final counters (killed).
        self.without_final_data: list[str] = []
        # Every pid with a stream file, readable or not (cpu-PID[.N].xpstream).
        self.recorded_pids: set[int] = set()

    def events(self) -> Iterator[model.Event]:
        paths = stream_paths(self.directory, STREAM_GLOB)
        self.recorded_pids = {stream_pid(path) for path in paths}
        for stream in read_streams(paths, self.counts):
            yield from self._process(stream)

    def _process(self, stream: Stream) -> Iterator[model.Event]:
        counts = self.counts
        # First: a stream the full disk cut may hold nothing more.  final: its final flush ran
        # (the process was not killed), whatever it could not write.
        final = count_unwritten(stream, counts)
        info = process_events(stream, counts)
        if info is None:
            # Not even its first write: ended (killed) within its first flush period.
            counts["streams_without_counters"] += 1
            counts["streams_counters_unwritten"] += int(final)
            self.without_final_data.append(f"pid {stream_pid(stream.path)} (no data)")
            return
        pid, events = info
        yield from events
        process = events[0]
        strings = dict(
            zip(stream.table("STRING")["string_id"], stream.table("STRING")["text"], strict=True)
        )
        stacks = stream_stacks(stream, strings, self.symbolizer, first_exact=True, counts=counts)
        counters = stream.table("COUNTER")
        if counters.rows:
            last = dict(zip(counters["name"], counters["value"], strict=True))
            for key in _SUMMED:
                counts[key.removeprefix("cpu_")] += last.get(key, 0)
            minor = last.get("cpu_python_unsupported_minor", 0)
            if minor:
                counts["streams_python_unsupported"] += 1
                counts["python_unsupported_minor"] = max(counts["python_unsupported_minor"], minor)
        else:
            counts["streams_without_counters"] += 1  # killed before its final flush, or
            counts["streams_counters_unwritten"] += int(final)  # it ran but could not write
            if isinstance(process, model.ProcessInfo):
                self.without_final_data.append(f"pid {pid} ({process.name})")
        samples = stream.table("CPU_SAMPLE")
        empty = model.Stack(())
        triggers = samples["trigger"] if "trigger" in samples.columns else [0] * samples.rows
        cursor: dict[int, int] = {}  # tid -> next unjoined kernel sample
        for i in range(samples.rows):
            end = samples["unwind_end"][i]
            reason = UNWIND_ENDS[end] if end < len(UNWIND_ENDS) else "other"
            counts[f"unwind_{reason}"] += 1
            stack = stacks.get(samples["stack_id"][i], empty)
            if triggers[i]:
                stack = self._with_kernel(stack, samples["tid"][i], samples["timestamp"][i], cursor)
            if any(model.is_python_frame(f) for f in stack.frames):
                counts["samples_with_python"] += 1
            counts["samples"] += 1
            yield model.CpuSample(pid, samples["tid"][i], samples["timestamp"][i], stack)
        if counters.rows:
            threshold = last.get("cpu_wait_threshold_ns", 0)
            counts["wait_threshold_ns"] = max(counts["wait_threshold_ns"], threshold)
        yield from self._waits(stream, pid, strings, stacks)

    def _waits(
        self,
        stream: Stream,
        pid: int,
        strings: Mapping[int, str],
        stacks: Mapping[int, model.Stack],
    ) -> Iterator[model.Event]:
        """The WAIT rows as one batch of `wait` slices, after their stacks at entry."""
        waits = stream.table("WAIT")
        counts = self.counts
        rows = SliceRows()
        for i in range(waits.rows):
            tid, ts = waits["tid"][i], waits["start"][i]
            call = strings.get(waits["call_id"][i], "?")
            counts["waits"] += 1
            counts["wait_ns"] += waits["duration"][i]
            rows.cpu(
                pid,
                tid,
                ts,
                waits["duration"][i],
                f"waiting in {call}",
                model.CAT_WAIT,
                {"call": call},
            )
            stack = stacks.get(waits["stack_id"][i])
            if stack is not None and stack.frames:
                yield model.WaitStack(pid, tid, ts, stack)
            else:
                counts["waits_without_stack"] += 1
        if rows.rows:
            yield rows.batch()

    def _with_kernel(
        self, user: model.Stack, tid: int, ts: int, cursor: dict[int, int]
    ) -> model.Stack:
        """The user stack with the kernel stack of the eBPF sample whose signal triggered it:
        the latest one of the thread at or before ts (the signal is handled on the way back
        to user space, so it comes after), each used once."""
        kernel = self.kernel_stacks.get(tid, ())
        j = cursor.get(tid, 0)
        best = None
        while j < len(kernel) and kernel[j][0] <= ts:
            best = j
            j += 1
        if best is None or ts - kernel[best][0] > _JOIN_WINDOW_NS:
            self.counts["kernel_join_missed"] += 1
            return user
        if best > cursor.get(tid, 0):
            self.counts["kernel_samples_unjoined"] += best - cursor.get(tid, 0)
        cursor[tid] = best + 1
        self.counts["kernel_joined"] += 1
        return model.Stack(user.frames + kernel[best][1])
