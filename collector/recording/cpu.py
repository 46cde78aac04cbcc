"""The in-process CPU source of a recording: the sampler library LD_PRELOAD'ed into every
process of the target's tree (children inherit the environment), its streams read after the
target exits (collector/sources/cpu_stream.py); as root, an eBPF sampler of kernel-mode time
puts kernel frames on top of the samples taken in the kernel."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from collector import model
from collector.recording.credentials import share_with_target, target_credentials
from collector.recording.size_limit import directory_bytes
from collector.sources.bcc_sampler import BccKernelModeSampler
from collector.sources.cpu_stream import InprocessCpuSource
from collector.window_control import WindowState


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
    ) -> None:
        """kernel: as root, the eBPF sampler of kernel-mode time whose stacks go on top.
        directory: where the streams go (record's kept_streams.StreamsDir, which removes it
        once the trace is written); by default a temporary one this source removes."""
        self.library = library
        self.freq = freq
        self.python_frames = python_frames
        self.kernel = kernel
        self._owns_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="xpu-perf-cpu-"))
        share_with_target(self.directory)
        self._source: InprocessCpuSource | None = None

    def target_env(self) -> Mapping[str, str]:
        library = self.library
        if target_credentials():
            # Under sudo the target runs as the user, who may not reach root's cache.
            library = self.directory / self.library.name
            shutil.copy2(self.library, library)
            library.chmod(0o755)
        preload = " ".join(p for p in (str(library), os.environ.get("LD_PRELOAD", "")) if p)
        return {
            "LD_PRELOAD": preload,
            "XPU_PERF_CPU_KERNEL": "1" if self.kernel else "0",
            "XPU_PERF_CPU_HZ": str(self.freq),
            "XPU_PERF_CPU_OUT_DIR": str(self.directory),
            "XPU_PERF_PYTHON": "1" if self.python_frames else "0",
        }

    def start(self) -> None:
        if self.kernel:
            self.kernel.start()

    def target_started(self, pid: int) -> None:
        if self.kernel:
            self.kernel.target_started(pid)

    def follow_windows(self, windows: WindowState) -> None:
        """The library samples only inside windows by itself; the eBPF kernel-mode sampler
        beside it is paused from here."""
        if self.kernel:
            self.kernel.follow_windows(windows)

    def keep_only(self, windows: Sequence[model.CaptureWindow]) -> None:
        """Nothing to drop: the library takes no sample outside a window, and a kernel-mode
        sample outside one finds no in-process sample to join."""

    def stop(self) -> None:
        if self.kernel:
            self.kernel.stop()

    def recorded_bytes(self) -> int:
        return directory_bytes(self.directory)

    def events(self) -> Iterable[model.Event]:
        kernel = self.kernel.kernel_samples() if self.kernel else None
        self._source = InprocessCpuSource(self.directory, kernel_stacks=kernel)
        yield from self._source.events()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def stats(self) -> Mapping[str, int]:
        counts = dict(self._source.counts) if self._source else {}
        if self.kernel:
            kernel = self.kernel.stats()
            counts["kernel_samples"] = kernel.get("cpu_samples", 0)
            counts["kernel_lost_ringbuf_full"] = kernel.get("lost_ringbuf_full", 0)
        return counts
