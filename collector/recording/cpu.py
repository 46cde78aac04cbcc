"""The in-process CPU source of a recording: the sampler library LD_PRELOAD'ed into every
process of the target's tree (children inherit the environment), its streams read after the
target exits (collector/sources/cpu_stream.py); as root, an eBPF sampler of kernel-mode time
puts kernel frames on top of the samples taken in the kernel."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from collector import model
from collector.recording.credentials import share_with_target
from collector.recording.libraries import loadable_by_target
from collector.recording.options import DEFAULT_WAIT_THRESHOLD_US
from collector.recording.process_tree import ProcessTreeWatch, not_recorded
from collector.recording.size_limit import directory_bytes
from collector.recording.source import SharedSymbols
from collector.recording.summary import say
from collector.sources.bcc_sampler import BccKernelModeSampler
from collector.window_control import WindowState
from collector.window_spans import inside, window_spans

if TYPE_CHECKING:  # the stream decoder (numpy) loads once the target ran: events()
    from collector.sources.cpu_stream import InprocessCpuSource


class InprocessCpuRecording:
    """The CPU source: the sampler library LD_PRELOAD'ed into every process of the target's
    tree (children inherit the environment), streams read after the target exits."""

    name = "cpu"

    def __init__(
        self,
        library: Path,
        freq: int,
        python_frames: bool = True,
        kernel: BccKernelModeSampler | None = None,
        directory: Path | None = None,
        wait_threshold_us: int = DEFAULT_WAIT_THRESHOLD_US,
        kernel_from_start: bool = False,
    ) -> None:
        """kernel: as root, the eBPF sampler of kernel-mode time whose stacks go on top.
        directory: where the streams go (record's kept_streams.StreamsDir, which removes it
        once the trace is written); by default a temporary one this source removes.
        wait_threshold_us: blocking calls recorded from this long (0: none).
        kernel_from_start: the target waits for `kernel` to be compiled and attached (else
        it is compiled while the target runs and follows it from then on)."""
        self.kernel_from_start = kernel_from_start
        self.wait_threshold_us = wait_threshold_us
        self.symbols = SharedSymbols()  # select_sources gives the GPU source the same one
        self.library = library
        self.freq = freq
        self.python_frames = python_frames
        self.kernel = kernel
        self._owns_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="xpu-perf-cpu-"))
        share_with_target(self.directory)
        self._source: InprocessCpuSource | None = None
        self._tree = ProcessTreeWatch()
        self._spans: list[tuple[int, int]] | None = None  # keep_only's windows
        self._outside = 0

    def target_env(self) -> Mapping[str, str]:
        # run_target puts it ahead of the user's own LD_PRELOAD.
        return {
            "LD_PRELOAD": str(loadable_by_target(self.library)),
            "XPU_PERF_CPU_KERNEL": "1" if self.kernel else "0",
            "XPU_PERF_CPU_HZ": str(self.freq),
            "XPU_PERF_CPU_OUT_DIR": str(self.directory),
            "XPU_PERF_PYTHON": "1" if self.python_frames else "0",
            "XPU_PERF_WAIT_THRESHOLD_US": str(self.wait_threshold_us),
        }

    def start(self) -> None:
        # The eBPF kernel-mode sampler compiles while the target starts and runs, and
        # follows it once ready (its kernel frames and kernel-mode samples are extra detail
        # on top of the in-process samples): the target never waits seconds for clang.
        if self.kernel and self.kernel_from_start:
            self.kernel.start()
        elif self.kernel:
            self.kernel.start_in_background()

    def target_started(self, pid: int) -> None:
        self._tree.start(pid)
        if self.kernel and self.kernel_from_start:
            self.kernel.target_started(pid)
        elif self.kernel:
            self.kernel.follow_target(pid)

    def follow_windows(self, windows: WindowState) -> None:
        """The library samples only inside windows by itself; the eBPF kernel-mode sampler
        beside it is paused from here."""
        if self.kernel:
            self.kernel.follow_windows(windows)

    def keep_only(self, windows: Sequence[model.CaptureWindow]) -> None:
        """Keep only the samples inside the windows: the library stops sampling when it sees
        a window closed, but a sample taken between record's close time and the library
        seeing the flag would fall outside; such samples are dropped and counted
        (samples_outside_window).  A kernel-mode sample outside one finds no in-process
        sample to join."""
        self._spans = window_spans(windows)

    def stop(self) -> None:
        self._tree.stop()
        if self.kernel:
            self.kernel.stop()
            if self.kernel.failure:
                say(f"eBPF kernel-mode sampler: {self.kernel.failure}")

    def recorded_bytes(self) -> int:
        return directory_bytes(self.directory)

    def events(self) -> Iterable[model.Event]:
        from collector.sources.cpu_stream import InprocessCpuSource

        kernel = self.kernel.kernel_samples() if self.kernel else None
        self._source = InprocessCpuSource(
            self.directory, kernel_stacks=kernel, symbolizer=self.symbols.symbolizer()
        )
        spans = self._spans
        if spans is None:
            yield from self._source.events()
        else:
            starts = [start for start, _ in spans]
            for event in self._source.events():
                if isinstance(event, model.CpuSample) and not inside(spans, starts, event.ts):
                    self._outside += 1
                    continue
                yield event
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def processes_without_final_data(self) -> Sequence[str]:
        return list(self._source.without_final_data) if self._source else []

    def processes_not_recorded(self) -> Sequence[str]:
        """Processes of the tree without a stream: the library was not loaded (environment
        cleared, a static binary) or could not write (another user)."""
        recorded = self._source.recorded_pids if self._source else set()
        return not_recorded(self._tree.seen, recorded)

    def stats(self) -> Mapping[str, int]:
        counts = dict(self._source.counts) if self._source else {}
        counts["processes_not_sampled"] = len(self.processes_not_recorded())
        counts["samples_outside_window"] = self._outside
        # Known here too: a process whose final counters were lost (a full disk) cannot say it.
        threshold_ns = self.wait_threshold_us * 1000
        counts["wait_threshold_ns"] = max(counts.get("wait_threshold_ns", 0), threshold_ns)
        if self.kernel:
            kernel = self.kernel.stats()
            counts["kernel_samples"] = kernel.get("cpu_samples", 0)
            counts["kernel_lost_ringbuf_full"] = kernel.get("lost_ringbuf_full", 0)
            if "unsampled_kernel_ms" in kernel:  # compiled while the target ran
                counts["kernel_attach_delay_ms"] = kernel["attach_delay_ms"]
                counts["kernel_unsampled_ms"] = kernel["unsampled_kernel_ms"]
                counts["kernel_unsampled_samples"] = kernel["unsampled_kernel_samples"]
                counts["kernel_sampler_failed"] = kernel["failed"]
        return counts
