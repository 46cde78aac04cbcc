"""CPU sampler: timer samples of the target's process tree, user + kernel stacks, via bcc.

A software cpu-clock perf event per CPU fires `freq` times a second (period 1e9/freq ns of
CPU time); bpf/cpu_sampler.bpf.c keeps the samples of followed processes.  A thread running
for T seconds of CPU time therefore yields about freq × T samples.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import resource
import struct
import threading
import time
from collections.abc import Iterator, Sequence

from collector.model import CaptureWindow, CpuSample, Event, Frame, Stack
from collector.sources.bcc_api import BpfProgram
from collector.sources.bcc_process_tree import ProcessTree, descendants, kernel_cpu_ns
from collector.sources.bcc_source import (
    EV_SAMPLE,
    MAX_FRAMES,
    BccSource,
    BccUnavailable,
    comm_str,
    stack_words,
)
from collector.symbolize import MapsSnapshot, Symbolizer
from collector.window_control import WindowState
from collector.window_spans import inside, window_spans

DEFAULT_FREQ_HZ = 99

# struct xp_sample_event header; the two stacks follow at fixed offsets.
_SAMPLE_HEADER = struct.Struct("<IIIIQ16sii")
_USTACK_OFFSET = _SAMPLE_HEADER.size
_KSTACK_OFFSET = _USTACK_OFFSET + 8 * MAX_FRAMES


class BccCpuSampler(BccSource):
    """Timer-sampled stacks of the target's process tree."""

    program = "cpu_sampler.bpf.c"
    ringbuf_pages = 1024  # 4 MiB: ~2000 samples of 2 KiB between two 100 ms drains

    def __init__(self, freq: int = DEFAULT_FREQ_HZ, kernel_stacks: bool = True) -> None:
        super().__init__()
        if not 1 <= freq <= 10_000:
            raise ValueError(f"sampling frequency {freq} Hz outside 1..10000")
        self.freq = freq
        self.kernel_stacks = kernel_stacks
        self._samples: list[tuple[int, int, int, int, MapsSnapshot | None, bytes, bytes]] = []
        self._symbolizer = Symbolizer()
        self._windows: WindowState | None = None
        self._paused: bool | None = None
        self.samples_outside_window = 0

    def follow_windows(self, windows: WindowState) -> None:
        """Sample only inside the recording's capture windows: the BPF program is paused
        (no sample, no signal) while none is open, checked on every drain round, 10 ms
        apart here (a window's first 10 ms may have no eBPF sample)."""
        self._windows = windows
        self.poll_ms = 10

    def keep_only(self, windows: Sequence[CaptureWindow]) -> None:
        """Drop the samples taken outside every window (those of the pause's lag after a
        close), counted as samples_outside_window; call after stop()."""
        spans = window_spans(windows)
        starts = [start for start, _ in spans]
        kept = [s for s in self._samples if inside(spans, starts, s[2])]
        self.samples_outside_window += len(self._samples) - len(kept)
        self._samples = kept

    def periodic(self) -> None:
        if self._windows is None or self.bpf is None:
            return
        paused = not (self._windows.tree_open or self._windows.process_windows > 0)
        if paused != self._paused:
            self.bpf["paused"][ctypes.c_int(0)] = ctypes.c_uint32(int(paused))
            self._paused = paused

    def attach(self) -> None:
        from bcc import PerfSWConfig, PerfType

        # A fixed period rather than sample_freq: the kernel never re-tunes it, so every
        # sample stands for the same 1/freq s of CPU time.
        self.loaded.attach_perf_event(
            ev_type=PerfType.SOFTWARE,
            ev_config=PerfSWConfig.CPU_CLOCK,
            fn_name=b"on_cpu_clock",
            sample_period=1_000_000_000 // self.freq,
            cpu=-1,
        )
        self.periodic()  # paused from the start when the windows are closed

    def detach(self) -> None:
        from bcc import PerfSWConfig, PerfType

        self.loaded.detach_perf_event(PerfType.SOFTWARE, PerfSWConfig.CPU_CLOCK)

    def on_data_record(self, kind: int, data: bytes) -> None:
        if kind != EV_SAMPLE:
            return
        _, pid, tid, cpu, ts, comm, ubytes, kbytes = _SAMPLE_HEADER.unpack_from(data)
        ustack = stack_words(data, _USTACK_OFFSET, ubytes)
        maps = self.registry.on_event(pid, tid, comm_str(comm), ustack)
        kstack = stack_words(data, _KSTACK_OFFSET, kbytes) if self.kernel_stacks else b""
        self._samples.append((pid, tid, ts, cpu, maps, ustack.tobytes(), bytes(kstack)))

    # --- results -----------------------------------------------------------------------

    def events(self) -> Iterator[Event]:
        """Process/thread names, then one CpuSample per sample (call after stop())."""
        yield from self.registry.info_events()
        stacks: dict[tuple[int, bytes, bytes], Stack] = {}
        for pid, tid, ts, cpu, maps, ustack, kstack in self._samples:
            key = (id(maps), ustack, kstack)
            stack = stacks.get(key)
            if stack is None:
                stack = stacks[key] = self._stack(maps, ustack, kstack)
            yield CpuSample(pid=pid, tid=tid, ts=ts, stack=stack, cpu=cpu)

    def _stack(self, maps: MapsSnapshot | None, ustack: bytes, kstack: bytes) -> Stack:
        user: list[Frame] = self._symbolizer.user_frames(maps, _words(ustack))
        kernel: list[Frame] = self._symbolizer.kernel_frames(_words(kstack))
        # Leaf-first from BPF; the kernel frames run on top of the user ones (syscalls,
        # faults, interrupts), so root-first is reversed(user) then reversed(kernel).
        return Stack(tuple(reversed(user)) + tuple(reversed(kernel)))

    def stats(self) -> dict[str, int]:
        counters = self.kernel_counters()
        return {
            "cpu_samples": len(self._samples),
            "samples_outside_window": self.samples_outside_window,
            "lost_ringbuf_full": counters.get("lost_ringbuf_full", 0),
            "user_stack_errors": counters.get("user_stack_errors", 0),
            "kernel_stack_errors": counters.get("kernel_stack_errors", 0),
            "user_stacks_truncated": counters.get("user_stacks_truncated", 0),
            "untracked_forks": counters.get("untracked_forks", 0),
            "maps_missing": self.registry.maps_missing,
            "unresolved_frames": self._symbolizer.unresolved_frames,
            **self._symbolizer.perf_map_counts,
            "decode_errors": self.decode_errors,
            "bpf_run_ns": counters.get("bpf_run_ns", 0),
            "bpf_runs": counters.get("bpf_runs", 0),
        }


def _children_stime_ns() -> int:
    """Kernel-mode CPU time of the children this process reaped, so far."""
    return int(resource.getrusage(resource.RUSAGE_CHILDREN).ru_stime * 1e9)


def _words(raw: bytes) -> list[int]:
    words = struct.unpack(f"<{len(raw) // 8}Q", raw) if raw else ()
    return list(words)


class BccKernelModeSampler(BccCpuSampler):
    """As root, beside the in-process sampler: the kernel stacks of the samples that
    interrupted the kernel (bpf/cpu_sampler.bpf.c with XP_KERNEL_MODE_ONLY), each followed
    by SIGPROF to the thread, whose handler in the target takes the user stack.  Its events
    are not written on their own: `kernel_samples()` hands them to the join
    (collector.sources.cpu_stream)."""

    name = "ebpf_kernel"
    cflags = ("-DXP_KERNEL_MODE_ONLY",)
    # stop() joins the drain thread, which wakes at most this long after the target's end
    # (bcc's ring-buffer poll takes a timeout only): 20 ms rather than 100 of record's
    # finish, for 50 empty wake-ups a second.
    poll_ms = 20

    # --- attached after the target started ---------------------------------------------
    # bcc compiles the program with clang at every start (seconds, more on a loaded machine),
    # and bcc keeps no compiled object to reuse.  The target does not wait for it: the
    # compile runs on a thread of its own from `start_in_background`, and the program
    # follows the target's tree from the moment it is ready (`follow_target`).  The kernel-
    # mode CPU time the tree used before then has no sample (the in-process sampler's clock
    # counts user time only): measured, said in the summary, written in the metadata.

    def __init__(self, freq: int = DEFAULT_FREQ_HZ) -> None:
        super().__init__(freq)
        self._lock = threading.Lock()
        self._late = False  # started by start_in_background
        self._target: tuple[int, int] | None = None  # (pid, monotonic ns at its start)
        self._ended = False
        self._ready = threading.Event()
        self._symbols_read = threading.Event()
        self._children_stime = 0
        self._compiler_tid: int | None = None
        self.failure: str | None = None
        self.attach_delay_ns: int | None = None  # from the target's start to attaching
        self.unsampled_kernel_ns = 0

    def start_in_background(self) -> None:
        """Compile on a thread; `follow_target` then attaches as soon as both are there."""
        self._late = True
        self._children_stime = _children_stime_ns()
        threading.Thread(target=self._compile_then_follow, name="bcc-compile", daemon=True).start()

    def follow_target(self, pid: int) -> None:
        with self._lock:
            self._target = (pid, time.monotonic_ns())
            self._children_stime = _children_stime_ns()
        self._ready.set()

    def _compile_then_follow(self) -> None:
        self._compiler_tid = threading.get_native_id()
        try:
            bpf = self.compile()
        except BccUnavailable as exc:
            self.failure = str(exc)
            return
        # Cleaned up here or by release(), on threads of their own: bcc's own cleanup at
        # exit would run a second time, beside or after them (and fail loudly).
        atexit.unregister(bpf.cleanup)
        self._ready.wait()
        with self._lock:
            if self._ended or self._target is None:  # the target was over first
                bpf.cleanup()
                return
            pid, started_ns = self._target
            self.bpf = bpf
            try:
                self.follow(ProcessTree(pids=(pid,)))
            except Exception as exc:  # bcc raises bare Exception when attaching fails
                self.failure = f"could not attach: {exc}"
                self.bpf = None
                bpf.cleanup()
                return
            self.attach_delay_ns = time.monotonic_ns() - started_ns
            self.unsampled_kernel_ns = kernel_cpu_ns(descendants((pid,)))
        # Kernel samples may come from now on: their symbols read while the target runs,
        # not after it.
        try:
            self._symbolizer.load_kernel_symbols()
        finally:
            self._symbols_read.set()

    def stop(self) -> None:
        if not self._late:
            super().stop()
            return
        with self._lock:
            self._ended = True
            if self.bpf is None:
                # Never attached: all of the tree's kernel-mode time (the children record
                # reaped since the target started: the target and what it reaped) went
                # unsampled.
                self.unsampled_kernel_ns = max(0, _children_stime_ns() - self._children_stime)
                self._yield_compiler()
        self._ready.set()
        super().stop()

    def _yield_compiler(self) -> None:
        """The compile still running is of no more use (bcc cannot stop clang), and on a
        busy machine it would take a CPU from the writing of the trace: it gets what is
        left over (nice 19) until record exits."""
        if self._compiler_tid is not None:
            with contextlib.suppress(OSError):
                os.setpriority(os.PRIO_PROCESS, self._compiler_tid, 19)

    def release(self, bpf: BpfProgram) -> None:
        # Closing its perf events and tracepoints takes a while, nothing record waits for:
        # the trace is written meanwhile (the kernel closes what is left if record exits
        # first).  bcc's own cleanup at exit would run it a second time, and fail loudly.
        atexit.unregister(bpf.cleanup)
        threading.Thread(target=bpf.cleanup, daemon=True).start()

    def stats(self) -> dict[str, int]:
        out = super().stats()
        if self._late:
            out["attach_delay_ms"] = (
                -1 if self.attach_delay_ns is None else self.attach_delay_ns // 1_000_000
            )
            out["unsampled_kernel_ms"] = self.unsampled_kernel_ns // 1_000_000
            out["unsampled_kernel_samples"] = self.unsampled_kernel_ns * self.freq // 10**9
            out["failed"] = int(self.failure is not None)
        return out

    def kernel_samples(self) -> dict[int, list[tuple[int, tuple[Frame, ...]]]]:
        """tid -> [(ts, kernel frames root first)], in time order (call after stop())."""
        if self._late and self._samples:
            self._symbols_read.wait()  # being read on the thread that attached
        out: dict[int, list[tuple[int, tuple[Frame, ...]]]] = {}
        frames: dict[bytes, tuple[Frame, ...]] = {}
        for _pid, tid, ts, _cpu, _maps, _ustack, kstack in self._samples:
            stack = frames.get(kstack)
            if stack is None:
                kernel = self._symbolizer.kernel_frames(_words(kstack))
                stack = frames[kstack] = tuple(reversed(kernel))
            out.setdefault(tid, []).append((ts, stack))
        for samples in out.values():
            samples.sort(key=lambda s: s[0])
        return out

    def events(self) -> Iterator[Event]:
        return iter(())
