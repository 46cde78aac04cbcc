"""The GPU counters of a recording (`record --gpu-metrics[=RATE]`, on by default): the
source chosen per GPU (collector/gpu_metrics/choice.py) read on a thread of `record` while
the target runs, written as counter tracks under each GPU's track.  What ran and why a
better source was refused go into the metadata (`gpu_metrics_source`,
`gpu_metrics_refused`, `gpu_metrics_missing`) and the summary; a refusal never fails the
recording."""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from collector import model
from collector.gpu_metrics import kept
from collector.gpu_metrics.choice import Choice, choose, load_pynvml
from collector.gpu_metrics.sampler import CounterSampler
from collector.recording.source import FinishedRun
from collector.window_control import WindowState

DEFAULT_RATE_HZ = 10.0
MAX_RATE_HZ = 100.0  # NVML's GPM answers in ~ms; faster is CUPTI PM sampling's range


def add_gpu_metrics_arguments(p: argparse.ArgumentParser) -> None:
    """record's --gpu-metrics[=RATE] and --no-gpu-metrics."""
    p.add_argument(
        "--gpu-metrics",
        nargs="?",
        type=float,
        const=DEFAULT_RATE_HZ,
        default=DEFAULT_RATE_HZ,
        metavar="RATE",
        help=f"GPU counters per device as counter tracks, RATE reads per second (default "
        f"{DEFAULT_RATE_HZ:g}, up to {MAX_RATE_HZ:g}): SM active, occupancy, tensor active, "
        "DRAM bandwidth, PCIe/NVLink (NVML GPM, Hopper and later), else NVML utilisation; "
        "memory used, clocks, power; the summary says which source ran and why a better "
        "one was refused",
    )
    p.add_argument("--no-gpu-metrics", action="store_true", help="no GPU counters")


class GpuMetricsRecording:
    """The GPU counter source: NVML read from `record`'s process, nothing in the target."""

    name = "gpu_metrics"

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        load_nvml: Callable[[], Any] = load_pynvml,
        visible_devices: str | None = None,
        directory: Path | None = None,
    ) -> None:
        """`visible_devices`: the target's CUDA_VISIBLE_DEVICES (default: record's own,
        which the target inherits).  `directory`: where the counters are kept when the
        target ends (record's stream directory), for a trace written later."""
        self.rate_hz = rate_hz
        self.directory = directory
        self._load_nvml = load_nvml
        self._visible = (
            visible_devices
            if visible_devices is not None
            else os.environ.get("CUDA_VISIBLE_DEVICES")
        )
        self._choice: Choice | None = None
        self._sampler: CounterSampler | None = None
        self._windows: WindowState | None = None
        self._outside_windows = 0

    # RecordSource
    def target_env(self) -> Mapping[str, str]:
        return {}

    def start(self) -> None:
        self._choice = choose(self._visible, self._load_nvml)
        if self._choice.devices:
            self._sampler = CounterSampler(self._choice.devices, round(1e9 / self.rate_hz))
            self._sampler.windows = self._windows
            self._sampler.start()

    def target_started(self, pid: int) -> None:
        pass

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
        if self._choice is not None:
            self._choice.close()
        if self.directory is not None and self._sampler is not None:
            # Best effort, as the manifest's end: the trace is written from memory.
            with contextlib.suppress(OSError):
                self._keep(self.directory, self._sampler)

    def _keep(self, directory: Path, sampler: CounterSampler) -> None:
        """The counters beside the streams, for a trace written later (--from-streams)."""
        devices = [model.GpuDevice(c.source.device, c.source.name) for c in sampler.devices]
        series = [s for c in sampler.devices for s in c.series()]
        kept.save(directory, devices, series, self.stats(), self.metadata(), self.summary_lines())

    def events(self) -> Iterable[model.Event]:
        if self._sampler is None:
            return
        for columns in self._sampler.devices:
            yield model.GpuDevice(columns.source.device, columns.source.name)
            yield from columns.series()

    def stats(self) -> Mapping[str, int]:
        sampler = self._sampler
        if sampler is None:
            return {"devices": 0}
        return {
            "devices": len(sampler.devices),
            "reads": sampler.ticks,
            "late_reads": sampler.late_ticks,
            "read_errors": sum(c.read_errors for c in sampler.devices),
            "samples_outside_window": self._outside_windows,
        }

    # What the summary and the metadata say beyond counts.
    def metadata(self) -> Mapping[str, model.ArgValue]:
        choice = self._choice
        if choice is None:
            return {}
        out: dict[str, model.ArgValue] = {"gpu_metrics_source": choice.source}
        if self._sampler is not None:
            out["gpu_metrics_rate_hz"] = self.rate_hz
        if choice.refused:
            out["gpu_metrics_refused"] = "; ".join(choice.refused)
        missing = self.missing()
        if missing:
            out["gpu_metrics_missing"] = "; ".join(missing)
        return out

    def missing(self) -> list[str]:
        """`GPU D: counter (why)` for each counter that never had a value, and GPM reads
        that stopped mid-run."""
        out = []
        for columns in self._sampler.devices if self._sampler else ():
            device = columns.source.device
            for name, why in columns.missing().items():
                out.append(f"GPU {device}: {name} ({why})")
            if columns.gpm_stopped:
                out.append(f"GPU {device}: GPM reads stopped mid-run ({columns.gpm_stopped})")
        return out

    def summary_lines(self) -> list[str]:
        choice = self._choice
        if choice is None:
            return []
        if not choice.devices:
            why = "; ".join(r for r in choice.refused if not r.startswith("cupti"))
            return [f"GPU metrics: none ({why or 'no GPU visible'})"]
        devices = ", ".join(f"GPU {d.device} {d.source}" for d in choice.devices)
        lines = [f"GPU metrics at {self.rate_hz:g} Hz: {devices}"]
        lines += [f"GPU metrics refused: {why}" for why in choice.refused]
        # One line per device and reason: a short capture window leaves every interval
        # metric without a value, which would otherwise be a dozen lines.
        grouped: dict[tuple[object, str], list[str]] = {}
        for columns in self._sampler.devices if self._sampler else ():
            for name, why in columns.missing().items():
                grouped.setdefault((columns.source.device, why), []).append(name)
            if columns.gpm_stopped:
                lines.append(
                    f"GPU metrics: GPU {columns.source.device}: GPM reads stopped mid-run "
                    f"({columns.gpm_stopped})"
                )
        lines += [
            f"GPU metrics missing on GPU {device} ({why}): {', '.join(names)}"
            for (device, why), names in grouped.items()
        ]
        return lines

    # WindowFollower: read only while a window is open, then keep only what is inside one.
    def follow_windows(self, windows: WindowState) -> None:
        self._windows = windows

    def keep_only(self, windows: Sequence[model.CaptureWindow]) -> None:
        if self._sampler is None:
            return
        spans = [(w.start, w.end) for w in windows]
        for columns in self._sampler.devices:
            self._outside_windows += columns.keep_only(spans)


class KeptGpuMetrics(FinishedRun):
    """The counters a recording kept beside its streams, as a source for
    `record --from-streams` (the same events, metadata and summary lines)."""

    name = "gpu_metrics"

    def __init__(self, directory: Path) -> None:
        self._kept = kept.load(directory)

    def events(self) -> Iterable[model.Event]:
        return kept.events(self._kept)

    def stats(self) -> Mapping[str, int]:
        return self._kept.stats

    def metadata(self) -> Mapping[str, model.ArgValue]:
        return self._kept.metadata

    def summary_lines(self) -> list[str]:
        return self._kept.summary_lines
