"""The GPU source of a recording: the CUPTI injection library loaded into the target (and its
children) through CUDA_INJECTION64_PATH, writing one stream per process into a private
directory; after the target exits the streams become GPU ops, CUDA API slices, flows and
launch stacks (collector/sources/cupti.py).  Needs no root."""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from collector import model
from collector.gpu_metrics import catalog
from collector.owned_files import read_owned, replace
from collector.recording.credentials import share_with_target
from collector.recording.libraries import loadable_by_target
from collector.recording.options import KINDS
from collector.recording.program_profiler import ProgramProfilerPlan, notes, summary_lines
from collector.recording.size_limit import directory_bytes
from collector.recording.source import SharedSymbols
from collector.recording.windows import NVTX_PREFIX, CapturePlan

if TYPE_CHECKING:  # the stream decoders (numpy) load once the target ran: events()
    from collector.sources.cupti import CuptiSource
    from collector.sources.cupti_pm_sampling import PmSampling


def pm_sampling_env(rate_hz: float) -> dict[str, str]:
    """What asks the injection library for PM sampling: the metric list (the catalog, its
    one place) and the sampling interval."""
    return {
        "XPU_PERF_PM_METRICS": ",".join(c.metric for c in catalog.PM_COUNTERS),
        "XPU_PERF_PM_INTERVAL_NS": str(round(1e9 / rate_hz)),
    }


class CuptiRecording:
    """The GPU source: CUPTI injection into the target, streams read after it exits."""

    name = "cupti"

    def __init__(
        self,
        library: Path,
        *,
        stacks: bool = True,
        python_frames: bool = True,
        kinds: Sequence[str] = KINDS,
        keep_streams: Path | None = None,
        capture: CapturePlan | None = None,
        directory: Path | None = None,
        process_hooks: Path | None = None,
        program_profiler: ProgramProfilerPlan | None = None,
        pm_sampling_hz: float | None = None,
    ) -> None:
        """directory: where the streams go (record's kept_streams.StreamsDir, which removes
        it once the trace is written); by default a temporary one this source removes.
        process_hooks: the CPU sampler library, preloaded (sampling or not) for its
        process hooks: the injection library's final flush when a process ends through
        _exit or a signal it sends itself, or execs (cupti_inject/src/process_hooks.h); it
        also hands the program's own CUPTI calls to the injection library
        (cupti_inject/src/cupti_interpose.h).  program_profiler: what to do with those
        (collector/recording/program_profiler.py).  pm_sampling_hz: CUPTI PM sampling of
        the GPU counters in the target at this rate (record --gpu-metrics; None: off)."""
        self.library = library
        self.symbols = SharedSymbols()  # select_sources gives the CPU source the same one
        self.process_hooks = process_hooks
        self.capture = capture or CapturePlan()
        self.program_profiler = program_profiler or ProgramProfilerPlan()
        self.stacks = stacks
        self.python_frames = python_frames
        self.kinds = kinds
        self.keep_streams = keep_streams
        self.pm_sampling_hz = pm_sampling_hz
        self._owns_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="xpu-perf-cupti-"))
        share_with_target(self.directory)
        self._source: CuptiSource | None = None

    def target_env(self) -> Mapping[str, str]:
        env = {
            "CUDA_INJECTION64_PATH": str(loadable_by_target(self.library)),
            "XPU_PERF_OUT_DIR": str(self.directory),
            "XPU_PERF_STACKS": "1" if self.stacks else "0",
            "XPU_PERF_PYTHON": "1" if self.python_frames else "0",
            "XPU_PERF_KINDS": ",".join(self.kinds),
            **self.capture.library_env,
            **self.program_profiler.library_env,
        }
        if "XPU_PERF_WINDOW_DELAY_MS" in env:
            # --delay counts from the target's start: asked for just before it is started,
            # on the CLOCK_MONOTONIC the library compares it with (the same in every process
            # of the tree, so a child started later shares the window).
            env["XPU_PERF_WINDOW_T0_NS"] = str(time.monotonic_ns())
        if "marker" in self.kinds or self.capture.mode.startswith(NVTX_PREFIX):
            # NVTX hands its callbacks to this library, which passes them to the process's own
            # libcupti (pointing NVTX at a libcupti path could load a second copy).
            env["NVTX_INJECTION64_PATH"] = env["CUDA_INJECTION64_PATH"]
        if self.process_hooks is not None:
            env["LD_PRELOAD"] = str(loadable_by_target(self.process_hooks))
        if self.pm_sampling_hz is not None:
            env.update(pm_sampling_env(self.pm_sampling_hz))
        return env

    def pm_sampling(self) -> PmSampling | None:
        """What PM sampling did in the target (None: not asked for, or not read yet)."""
        if self.pm_sampling_hz is None or self._source is None:
            return None
        return self._source.pm_sampling

    def start(self) -> None:
        pass

    def target_started(self, pid: int) -> None:
        pass

    def stop(self) -> None:
        if self.keep_streams is not None:
            from collector.sources.cupti import stream_paths

            self.keep_streams.mkdir(parents=True, exist_ok=True)
            for p in stream_paths(self.directory):
                # A process that changed user wrote into uid-N/: kept as uid-N.<name>.
                name = p.name if p.parent == self.directory else f"{p.parent.name}.{p.name}"
                try:
                    # Only what the target's processes wrote; a new file renamed into place
                    # (replacing, never following, what has the name).
                    replace(self.keep_streams / name, read_owned(p))
                except OSError as exc:
                    print(f"xpu-perf: not kept: {exc}", file=sys.stderr)

    def events(self) -> Iterable[model.Event]:
        from collector.sources.cupti import CuptiSource

        self._source = CuptiSource(self.directory, self.symbols.symbolizer())
        yield from self._source.events()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def stats(self) -> Mapping[str, int]:
        return dict(self._source.counts) if self._source else {}

    def processes_without_final_data(self) -> Sequence[str]:
        return list(self._source.without_final_data) if self._source else []

    def processes_not_recorded(self) -> Sequence[str]:
        """Not known here: a process that never initialised CUDA has no stream either."""
        return []

    def notes(self) -> Mapping[str, str]:
        profilers = self._source.program_profilers if self._source else []
        return notes(self.program_profiler, profilers)

    def summary_lines(self) -> Sequence[str]:
        profilers = self._source.program_profilers if self._source else []
        return summary_lines(self.program_profiler, self.stats(), profilers)

    def windows(self) -> Sequence[model.CaptureWindow]:
        return list(self._source.windows) if self._source else []

    def recorded_bytes(self) -> int:
        return directory_bytes(self.directory)
