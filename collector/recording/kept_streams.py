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

import contextlib
import json
import os
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeGuard

from collector import model
from collector.errors import UserError
from collector.owned_files import read_owned, replace, write_new
from collector.recording import program_profiler
from collector.recording.credentials import share_with_target, target_credentials
from collector.recording.python_names import PythonNames
from collector.recording.source import FinishedRun, SharedSymbols

if TYPE_CHECKING:  # the readers (numpy) load only for --from-streams: kept_sources()
    from collector.recording.gpu_metrics import KeptGpuMetrics
    from collector.sources.cpu_stream import InprocessCpuSource
    from collector.sources.cupti import CuptiSource
    from collector.sources.cupti_pm_sampling import PmSampling


class WindowRecord(TypedDict):
    """A model.CaptureWindow as the manifest holds it (its fields, by name)."""

    pid: int
    start: int
    end: int
    reason: str
    end_reason: str


def window_record(window: model.CaptureWindow) -> WindowRecord:
    return WindowRecord(
        pid=window.pid,
        start=window.start,
        end=window.end,
        reason=window.reason,
        end_reason=window.end_reason,
    )


MANIFEST = "manifest.json"
MANIFEST_VERSION = 1
MAX_FREQ_HZ = 1_000_000  # far above any sampling rate record takes
MAX_CPUS = 1 << 16  # far above any machine's (Linux's own limit is 8192)
GPU_STREAMS = "cupti"
CPU_STREAMS = "cpu"
GPU_METRICS = "gpu_metrics"  # the counters record read itself (collector/gpu_metrics/kept.py)
PYTHON_NAMES = "python_names"  # the Python startup hook's (collector/recording/python_names.py)


def usable_cpus() -> int:
    """The CPUs this process (and the target, which inherits its affinity) may run on."""
    return len(os.sched_getaffinity(0))


@dataclass
class Manifest:
    """What the trace needs besides the streams (json in the directory)."""

    command_line: list[str]
    freq: int = 0  # CPU samples per second (0: no CPU samples)
    capture_mode: str = ""  # CapturePlan.mode
    host: str = field(default_factory=socket.gethostname)
    # The CPUs the program could use (its affinity); 0: unknown (a manifest of an older
    # record), never this machine's, which may not be the one that recorded.
    cpu_count: int = 0
    # Known at the end only (written there, if the disk lets it): the --max-size cut,
    # the windows record opened for the tree, the toggles.
    metadata: dict[str, int] = field(default_factory=dict)
    windows: list[WindowRecord] = field(default_factory=list)
    version: int = MANIFEST_VERSION


class StreamsDir:
    """One recording's private stream directory.

    The directory itself is root's (mkdtemp: 0700, or 0711 as root so that the target's
    users reach their subdirectories): only the subdirectories the target writes into are
    handed to the target's user under sudo, and what record writes itself (the manifest, the
    GPU counters) lies where no other user can plant a name (collector/owned_files.py).
    A recording kept under sudo is handed to the user once record has finished writing it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def create(cls) -> StreamsDir:
        path = Path(tempfile.mkdtemp(prefix="xpu-perf-rec-"))
        if os.geteuid() == 0:
            path.chmod(0o711)  # traversable, not listable; only root creates names in it
        return cls(path)

    def subdir(self, name: str, target_writes: bool = True) -> Path:
        """A subdirectory: one the target's processes write their streams into
        (`target_writes`: handed to the target's user under sudo), or one for record's
        own files (root's)."""
        directory = self.path / name
        directory.mkdir(mode=0o700)
        if target_writes:
            share_with_target(directory)
        return directory

    def write_manifest(self, manifest: Manifest) -> None:
        try:
            write_new(self.path / MANIFEST, _manifest_bytes(manifest))
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
            manifest.windows = [window_record(w) for w in windows]
            replace(self.path / MANIFEST, _manifest_bytes(manifest))
        except (OSError, UserError):
            pass

    def hand_over(self) -> None:
        """Under sudo, the kept recording becomes the user's, record's own files first and
        the directory last (so that until record is done with it, no name in it is the
        user's to replace); record writes nothing in it afterwards."""
        creds = target_credentials()
        if not creds:
            return
        uid, gid = creds["user"], creds["group"]
        with contextlib.suppress(OSError):
            for directory, _dirs, files in os.walk(self.path / GPU_METRICS):
                for name in files:
                    os.chown(Path(directory) / name, uid, gid, follow_symlinks=False)
                os.chown(directory, uid, gid, follow_symlinks=False)
            os.chown(self.path / MANIFEST, uid, gid, follow_symlinks=False)
            os.chown(self.path, uid, gid, follow_symlinks=False)
            self.path.chmod(0o700)

    def has_streams(self) -> bool:
        # uid-N/: processes that became another user (cupti_inject/src/process_hooks.c).
        found = [*self.path.glob("*/*.xpstream"), *self.path.glob("*/uid-*/*.xpstream")]
        return any(p.is_file() for p in found)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def _manifest_bytes(manifest: Manifest) -> bytes:
    return (json.dumps(asdict(manifest), indent=1) + "\n").encode()


def load_manifest(directory: Path) -> Manifest:
    """The manifest of a kept recording; a UserError of one line when it is not one."""
    path = directory / MANIFEST
    try:
        raw = json.loads(read_owned(path))
    except FileNotFoundError:
        raise UserError(f"{directory} is not a kept recording (no {MANIFEST})") from None
    except (OSError, ValueError) as exc:
        raise UserError(f"cannot read {path}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("version") != MANIFEST_VERSION:
        raise UserError(f"{path}: not a manifest this xpu-perf reads")
    problem = manifest_problem(raw)
    if problem is not None:
        raise UserError(f"{path}: {problem}: not a manifest record wrote (fix or remove it)")
    return Manifest(**raw)


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def manifest_problem(raw: Mapping[str, object]) -> str | None:
    """What makes `raw` not a manifest record wrote (None: nothing); every field is checked,
    so that nothing downstream prints or writes a value of the wrong kind."""
    known = {f.name for f in fields(Manifest)}
    unknown = sorted(set(raw) - known)
    if unknown:
        return f"unknown field {unknown[0]!r}"
    if "command_line" not in raw:
        return "no command_line"
    command = raw["command_line"]
    if not isinstance(command, list) or not all(isinstance(a, str) for a in command):
        return f"command_line must be a list of strings, not {_shown(command)}"
    freq = raw.get("freq", 0)
    if not _is_int(freq) or not 0 <= freq <= MAX_FREQ_HZ:
        return f"freq must be a whole number of Hz from 0 to {MAX_FREQ_HZ}, not {_shown(freq)}"
    if "cpu_count" in raw:
        count = raw["cpu_count"]
        if not _is_int(count) or not 1 <= count <= MAX_CPUS:
            return f"cpu_count must be a whole number from 1 to {MAX_CPUS}, not {_shown(count)}"
    for name in ("capture_mode", "host"):
        if name in raw and not isinstance(raw[name], str):
            return f"{name} must be a string, not {_shown(raw[name])}"
    metadata = raw.get("metadata", {})
    if not isinstance(metadata, dict) or not all(_is_int(v) for v in metadata.values()):
        return f"metadata must map names to whole numbers, not {_shown(metadata)}"
    windows = raw.get("windows", [])
    if not isinstance(windows, list) or not all(_window_ok(w) for w in windows):
        return f"windows must be a list of capture windows, not {_shown(windows)}"
    return None


def _window_ok(window: object) -> bool:
    names = {f.name for f in fields(model.CaptureWindow)}
    if not isinstance(window, dict) or set(window) != set(names):
        return False
    ints = ("pid", "start", "end")
    if not all(_is_int(window[k]) for k in ints):
        return False
    if not all(isinstance(window[k], str) for k in names if k not in ints):
        return False
    return 0 <= window["start"] <= window["end"]


class KeptSource(FinishedRun):
    """A RecordSource over the streams of a kept recording: the events the live source
    would have written (the same readers), for `record --from-streams`."""

    def __init__(self, name: str, directory: Path, symbols: SharedSymbols | None = None) -> None:
        self.name = name
        self.directory = directory
        self.symbols = symbols or SharedSymbols()
        self._source: CuptiSource | InprocessCpuSource | None = None
        self._gpu: CuptiSource | None = None  # the same reader, for the GPU streams

    def events(self) -> Iterable[model.Event]:
        from collector.sources.cpu_stream import InprocessCpuSource
        from collector.sources.cupti import CuptiSource

        if self.name == GPU_STREAMS:
            self._source = self._gpu = CuptiSource(self.directory, self.symbols.symbolizer())
        else:
            self._source = InprocessCpuSource(self.directory, symbolizer=self.symbols.symbolizer())
        yield from self._source.events()

    def _cupti(self) -> CuptiSource | None:
        """The GPU streams' reader, once events() ran (None for the CPU streams)."""
        return self._gpu

    def stats(self) -> Mapping[str, int]:
        return dict(self._source.counts) if self._source else {}

    def windows(self) -> Sequence[model.CaptureWindow]:
        cupti = self._cupti()
        return list(cupti.windows) if cupti is not None else []

    def pm_sampling(self) -> PmSampling | None:
        """What PM sampling did in the target (its rows are in the GPU streams)."""
        cupti = self._cupti()
        return cupti.pm_sampling if cupti is not None else None

    def _program_profilers(self) -> list[str]:
        cupti = self._cupti()
        return cupti.program_profilers if cupti is not None else []

    def notes(self) -> Mapping[str, str]:
        return program_profiler.notes(None, self._program_profilers())

    def summary_lines(self) -> Sequence[str]:
        if self._cupti() is None:
            return []
        return program_profiler.summary_lines(None, self.stats(), self._program_profilers())


def kept_sources(
    directory: Path, rejected: list[str] | None = None
) -> list[KeptSource | KeptGpuMetrics | PythonNames]:
    """The sources of a kept recording, in record's order (GPU, its counters, then CPU, then
    the names the Python startup hook reported).  Kept counters that cannot be read are
    left out, each said in one line and named in `rejected`."""
    from collector.gpu_metrics.kept import INDEX
    from collector.recording.gpu_metrics import KeptGpuMetrics

    sources: list[KeptSource | KeptGpuMetrics | PythonNames] = []
    symbols = SharedSymbols()  # the GPU and CPU streams name frames in the same libraries
    for name in (GPU_STREAMS, GPU_METRICS, CPU_STREAMS):
        if name == GPU_METRICS:
            if (directory / name / INDEX).exists():
                gpu = next((s for s in sources if isinstance(s, KeptSource)), None)
                pm = gpu.pm_sampling if gpu is not None else None
                try:
                    sources.append(KeptGpuMetrics(directory / name, pm))
                except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
                    print(f"xpu-perf: skipping the kept GPU counters: {exc}", file=sys.stderr)
                    if rejected is not None:
                        rejected.append(f"{name}/")
        elif (directory / name).is_dir():
            sources.append(KeptSource(name, directory / name, symbols))
    if sources and (directory / PYTHON_NAMES).is_dir():
        sources.append(PythonNames(directory / PYTHON_NAMES, hook=False))
    return sources
