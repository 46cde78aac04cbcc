"""The recording's raw streams on disk, kept when the trace cannot be written.

Every recording has one private directory: the injection library's per-process streams in
`cupti/`, the in-process CPU sampler's in `cpu/`, and `manifest.json`, written before the
target starts, with what writing the trace needs beyond the streams (the command line, the
sampling rate, the capture mode, the host).  Once the trace is written the directory goes.
When it cannot be written (a full disk, a permission, Ctrl-C while writing) the directory
stays, and `xpu-perf record --from-streams DIR -o OUT` writes the same trace from it later:
the recording is never lost to the writing.  (What eBPF sources hold in memory, such as
kernel-mode stacks, is not in the streams and is lost with the process.)
"""

from __future__ import annotations

import json
import shutil
import socket
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from collector import model
from collector.errors import UserError
from collector.gpu_metrics.kept import INDEX
from collector.recording import program_profiler
from collector.recording.credentials import share_with_target
from collector.recording.gpu_metrics import KeptGpuMetrics
from collector.recording.python_names import PythonNames
from collector.recording.source import FinishedRun
from collector.sources.cpu_stream import InprocessCpuSource
from collector.sources.cupti import CuptiSource
from collector.sources.cupti_pm_sampling import PmSampling

MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
GPU_STREAMS = "cupti"
CPU_STREAMS = "cpu"
GPU_METRICS = "gpu_metrics"  # the counters record read itself (collector/gpu_metrics/kept.py)
PYTHON_NAMES = "python_names"  # the Python startup hook's (collector/recording/python_names.py)


@dataclass
class Manifest:
    """What the trace needs besides the streams (json in the directory)."""

    command_line: list[str]
    freq: int = 0  # CPU samples per second (0: no CPU samples)
    capture_mode: str = ""  # CapturePlan.mode
    host: str = field(default_factory=socket.gethostname)
    # Known at the end only (written there, if the disk lets it): the --max-size cut,
    # the windows record opened for the tree, the toggles.
    metadata: dict[str, int] = field(default_factory=dict)
    windows: list[dict[str, Any]] = field(default_factory=list)
    version: int = MANIFEST_VERSION


class StreamsDir:
    """One recording's private stream directory (mkdtemp: mode 0700, handed to the target's
    user under sudo)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls) -> StreamsDir:
        path = Path(tempfile.mkdtemp(prefix="xpu-perf-rec-"))
        share_with_target(path)
        return cls(path)

    def subdir(self, name: str) -> Path:
        """The directory a source's target process writes its streams into."""
        directory = self.path / name
        directory.mkdir(mode=0o700)
        share_with_target(directory)
        return directory

    def write_manifest(self, manifest: Manifest) -> None:
        try:
            (self.path / MANIFEST).write_text(json.dumps(asdict(manifest), indent=1) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write in {self.path}: {exc.strerror}") from None

    def add_to_manifest(
        self, metadata: Mapping[str, int], windows: Sequence[model.CaptureWindow]
    ) -> None:
        """What the end of the run knows, added if the disk still takes it (best effort: the
        streams are what matters)."""
        try:
            manifest = load_manifest(self.path)
            manifest.metadata.update(metadata)
            manifest.windows = [asdict(w) for w in windows]
            (self.path / MANIFEST).write_text(json.dumps(asdict(manifest), indent=1) + "\n")
        except (OSError, UserError):
            pass

    def has_streams(self) -> bool:
        # uid-N/: processes that became another user (cupti_inject/src/process_hooks.c).
        found = [*self.path.glob("*/*.xpstream"), *self.path.glob("*/uid-*/*.xpstream")]
        return any(p.is_file() for p in found)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def load_manifest(directory: Path) -> Manifest:
    """The manifest of a kept recording; a UserError of one line when it is not one."""
    path = directory / MANIFEST
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{directory} is not a kept recording (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("version") != MANIFEST_VERSION:
        raise UserError(f"{path}: not a manifest this xpu-perf reads")
    try:
        return Manifest(**raw)
    except TypeError as exc:
        raise UserError(f"{path}: {exc}") from None


class KeptSource(FinishedRun):
    """A RecordSource over the streams of a kept recording: the events the live source
    would have written (the same readers), for `record --from-streams`."""

    def __init__(self, name: str, directory: Path) -> None:
        self.name = name
        self.directory = directory
        self._source: CuptiSource | InprocessCpuSource | None = None

    def events(self) -> Iterable[model.Event]:
        if self.name == GPU_STREAMS:
            self._source = CuptiSource(self.directory)
        else:
            self._source = InprocessCpuSource(self.directory)
        yield from self._source.events()

    def stats(self) -> Mapping[str, int]:
        return dict(self._source.counts) if self._source else {}

    def windows(self) -> Sequence[model.CaptureWindow]:
        if isinstance(self._source, CuptiSource):
            return list(self._source.windows)
        return []

    def pm_sampling(self) -> PmSampling | None:
        """What PM sampling did in the target (its rows are in the GPU streams)."""
        return self._source.pm_sampling if isinstance(self._source, CuptiSource) else None

    def _program_profilers(self) -> list[str]:
        return self._source.program_profilers if isinstance(self._source, CuptiSource) else []

    def notes(self) -> Mapping[str, str]:
        return program_profiler.notes(None, self._program_profilers())

    def summary_lines(self) -> Sequence[str]:
        if not isinstance(self._source, CuptiSource):
            return []
        return program_profiler.summary_lines(None, self.stats(), self._program_profilers())


def kept_sources(directory: Path) -> list[KeptSource | KeptGpuMetrics | PythonNames]:
    """The sources of a kept recording, in record's order (GPU, its counters, then CPU, then
    the names the Python startup hook reported)."""
    sources: list[KeptSource | KeptGpuMetrics | PythonNames] = []
    for name in (GPU_STREAMS, GPU_METRICS, CPU_STREAMS):
        if name == GPU_METRICS:
            if (directory / name / INDEX).is_file():
                gpu = next((s for s in sources if isinstance(s, KeptSource)), None)
                pm = gpu.pm_sampling if gpu is not None else None
                sources.append(KeptGpuMetrics(directory / name, pm))
        elif (directory / name).is_dir():
            sources.append(KeptSource(name, directory / name))
    if sources and (directory / PYTHON_NAMES).is_dir():
        sources.append(PythonNames(directory / PYTHON_NAMES, hook=False))
    return sources
