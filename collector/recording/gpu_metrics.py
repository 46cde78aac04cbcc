"""The GPU counters of a recording (`record --gpu-metrics[=RATE]`, on by default), as counter
tracks under each GPU's track, from the best source each GPU permitted: CUPTI PM sampling,
which the injection library runs in the target (its samples come with the GPU source's
streams: collector/sources/cupti_pm_sampling.py), else what NVML gives, read on a thread of
`record` while the target runs (collector/gpu_metrics/choice.py).  NVML is read in any case
(PM sampling's outcome is known only from the streams); where PM sampling ran on a GPU, its
tracks replace NVML's of the same name.  What ran and why a better source was refused go
into the metadata (`gpu_metrics_source`, `gpu_metrics_refused`, `gpu_metrics_missing`) and
the summary; a refusal never fails the recording."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from collector import model
from collector.gpu_metrics import catalog
from collector.gpu_metrics.choice import (
    GPM,
    NONE,
    PM_SAMPLING,
    Choice,
    choose,
    load_pynvml,
    source_names,
)
from collector.gpu_metrics.nvml_api import Nvml
from collector.gpu_metrics.sampler import CounterSampler, DeviceColumns
from collector.recording.source import FinishedRun
from collector.window_control import WindowState

if TYPE_CHECKING:  # numpy's: loaded once the target ran
    from collector.sources.cupti_pm_sampling import PmSampling

DEFAULT_RATE_HZ = 10.0
MAX_RATE_HZ = 10000.0  # CUPTI PM sampling's range (the hardware samples; we decode)
NVML_MAX_RATE_HZ = 100.0  # NVML's GPM answers in ~ms: NVML is read at most this often


def add_gpu_metrics_arguments(p: argparse.ArgumentParser) -> None:
    """record's --gpu-metrics[=RATE] and --no-gpu-metrics."""
    p.add_argument(
        "--gpu-metrics",
        nargs="?",
        type=float,
        const=DEFAULT_RATE_HZ,
        default=DEFAULT_RATE_HZ,
        metavar="RATE",
        help=f"GPU counters per device as counter tracks, RATE samples per second (default "
        f"{DEFAULT_RATE_HZ:g}, up to {MAX_RATE_HZ:g}; NVML read at most "
        f"{NVML_MAX_RATE_HZ:g}/s): SM active, issue, occupancy, tensor active, DRAM bandwidth "
        "and read/write, PCIe/NVLink (CUPTI PM sampling in the target, CUDA 12.6+, needs "
        "profiling permission), else NVML GPM (Hopper and later), else NVML utilisation; "
        "memory used, clocks, power; the summary says which source ran and why a better "
        "one was refused",
    )
    p.add_argument("--no-gpu-metrics", action="store_true", help="no GPU counters")


class GpuMetricsRecording:
    """The GPU counter source: NVML read from `record`'s process, PM sampling from the
    target's streams."""

    name = "gpu_metrics"

    def __init__(
        self,
        rate_hz: float = DEFAULT_RATE_HZ,
        load_nvml: Callable[[], Nvml] = load_pynvml,
        visible_devices: str | None = None,
        directory: Path | None = None,
        pm_sampling: Callable[[], PmSampling | None] | None = None,
    ) -> None:
        """`visible_devices`: the target's CUDA_VISIBLE_DEVICES (default: record's own,
        which the target inherits).  `directory`: where the counters are kept when the
        target ends (record's stream directory), for a trace written later.
        `pm_sampling`: what PM sampling did in the target, once the GPU source has read
        its streams (None: no GPU recording, so no PM sampling)."""
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
        self._pm_sampling = pm_sampling
        self._spans: list[tuple[int, int]] | None = None  # keep_only's windows
        self._superseded = 0  # NVML tracks replaced by PM sampling's
        self._kept_beside = 0  # NVML tracks of quantities PM sampling did not read

    # RecordSource
    def target_env(self) -> Mapping[str, str]:
        return {}

    def start(self) -> None:
        self._choice = choose(self._visible, self._load_nvml)
        if self._choice.devices:
            nvml_hz = min(self.rate_hz, NVML_MAX_RATE_HZ)
            self._sampler = CounterSampler(self._choice.devices, round(1e9 / nvml_hz))
            self._sampler.windows = self._windows
            self._sampler.start()

    def target_started(self, pid: int) -> None:
        pass

    def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
        if self._choice is not None:
            self._choice.close()
        if self.directory is not None and self._choice is not None:
            # Best effort, as the manifest's end: the trace is written from memory.  Kept
            # without NVML too: PM sampling's samples come from the kept streams.
            with contextlib.suppress(OSError):
                self._keep(self.directory)

    def _keep(self, directory: Path) -> None:
        """The counters beside the streams, for a trace written later (--from-streams)."""
        columns = self._sampler.devices if self._sampler else []
        devices = [model.GpuDevice(c.source.device, c.source.name) for c in columns]
        series = [s for c in columns for s in c.series()]
        from collector.gpu_metrics import kept

        kept.save(directory, devices, series, self.stats(), self.metadata(), self.summary_lines())

    def _pm(self) -> PmSampling | None:
        return self._pm_sampling() if self._pm_sampling is not None else None

    def events(self) -> Iterable[model.Event]:
        pm = self._pm()
        pm_series = list(pm.series(self._spans)) if pm is not None else []
        from_pm = {(s.device, s.name) for s in pm_series}
        self._superseded = self._kept_beside = 0
        for columns in self._sampler.devices if self._sampler else ():
            yield model.GpuDevice(columns.source.device, columns.source.name)
            for series in columns.series():
                track = nvml_track(series, pm, from_pm)
                if track is None:
                    self._superseded += 1
                    continue
                self._kept_beside += track is not series
                yield track
        yield from pm_series

    def stats(self) -> Mapping[str, int]:
        sampler = self._sampler
        pm = self._pm()
        out = {"devices": len(sampler.devices) if sampler else 0}
        if sampler is not None:
            out |= {
                "reads": sampler.ticks,
                "late_reads": sampler.late_ticks,
                "read_errors": sum(c.read_errors for c in sampler.devices),
                "samples_outside_window": self._outside_windows,
            }
        if pm is not None and pm.wanted:
            out["pm_devices"] = len(pm.started)
            out |= pm.counts
            for c in pm.coverage(self._interval_ns):
                out["pm_work_ns"] = out.get("pm_work_ns", 0) + c.work_ns
                out["pm_work_unsampled_ns"] = out.get("pm_work_unsampled_ns", 0) + c.uncovered_ns
                out["pm_work_coarse_ns"] = out.get("pm_work_coarse_ns", 0) + c.coarse_ns
            out["nvml_tracks_replaced"] = self._superseded
            out["nvml_tracks_beside_pm"] = self._kept_beside
        return out

    def _sources(self) -> str:
        """The source of each GPU's counters, as one name."""
        pm = self._pm()
        started = pm.started if pm is not None else set()
        devices = self._choice.devices if self._choice else []
        sources = {PM_SAMPLING if d.device in started else d.source for d in devices}
        return source_names(sources | ({PM_SAMPLING} if started else set()))

    def _refused(self) -> list[str]:
        """Why a better source did not run: PM sampling's reasons first, then NVML's."""
        pm = self._pm()
        out = []
        if self._pm_sampling is None:
            out.append(f"{PM_SAMPLING}: needs the GPU recording (CUDA injection)")
        elif pm is not None and not pm.wanted:
            out.append(f"{PM_SAMPLING}: no process of the target initialised CUDA")
        elif pm is not None:
            for device, d in sorted(pm.devices.items()):
                if not d.started:  # (another process may have had its counters: it ran)
                    out += [f"{PM_SAMPLING} on GPU {device}: {why}" for why in d.refused]
        started = pm.started if pm is not None else set()
        for why in self._choice.refused if self._choice else []:
            if not any(why.startswith(f"{GPM} on GPU {d}:") for d in started):
                out.append(why)  # a GPU where PM sampling ran did not need GPM
        return out

    # What the summary and the metadata say beyond counts.
    def metadata(self) -> Mapping[str, model.ArgValue]:
        choice = self._choice
        if choice is None:
            return {}
        out: dict[str, model.ArgValue] = {"gpu_metrics_source": self._sources()}
        pm = self._pm()
        if self._sampler is not None or (pm is not None and pm.started):
            out["gpu_metrics_rate_hz"] = self.rate_hz
        refused = self._refused()
        if refused:
            out["gpu_metrics_refused"] = "; ".join(refused)
        if pm is not None and pm.clock:
            out["gpu_metrics_pm_clock"] = pm.clock
        coverage = self._coverage_lines()
        if coverage:
            out["gpu_metrics_pm_coverage"] = "; ".join(coverage)
        missing = self.missing()
        if missing:
            out["gpu_metrics_missing"] = "; ".join(missing)
        return out

    @property
    def _interval_ns(self) -> int:
        return round(1e9 / self.rate_hz)

    def _coverage_lines(self) -> list[str]:
        """Per GPU, the GPU work PM sampling's samples left out or covered only coarsely."""
        pm = self._pm()
        if pm is None or not pm.started:
            return []
        lines = (c.words(self._interval_ns) for c in pm.coverage(self._interval_ns))
        return [line for line in lines if line]

    def missing(self) -> list[str]:
        """`GPU D: counter (why)` for each counter that never had a value, and GPM reads
        that stopped mid-run."""
        out = []
        pm = self._pm()
        for device, d in sorted(pm.devices.items()) if pm is not None else ():
            if not d.started:
                continue  # refused: what it lacked does not matter
            out += [
                f"GPU {device}: {m} (not in {d.chip}'s PM sampling tables, or past one pass)"
                for m in d.missing
            ]
        for columns in self._sampler.devices if self._sampler else ():
            device = columns.source.device
            for name, why in self._nvml_missing(columns).items():
                out.append(f"GPU {device}: {name} ({why})")
            if columns.gpm_stopped:
                out.append(f"GPU {device}: GPM reads stopped mid-run ({columns.gpm_stopped})")
        return out

    def _nvml_missing(self, columns: DeviceColumns) -> dict[str, str]:
        """NVML's counters without a value, but those PM sampling replaced."""
        pm = self._pm()
        return {
            name: why
            for name, why in columns.missing().items()
            if not replaced_by_pm(
                model.GpuCounterSeries(columns.source.device, name, "", (), ()), pm
            )
        }

    def summary_lines(self) -> list[str]:
        choice = self._choice
        if choice is None:
            return []
        pm = self._pm()
        started = pm.started if pm is not None else set()
        if not choice.devices and not started:
            why = "; ".join(self._refused())
            return [f"GPU metrics: none ({why or 'no GPU visible'})"]
        sources = {d.device: d.source for d in choice.devices}
        sources |= {device: PM_SAMPLING for device in started}
        devices = ", ".join(f"GPU {d} {source}" for d, source in sorted(sources.items()))
        lines = [f"GPU metrics at {self.rate_hz:g} Hz: {devices}"]
        if pm is not None and started:
            c = pm.counts
            cost = pm.cost_words()
            lines.append(
                f"GPU metrics: PM sampling {c['pm_samples']} samples, "
                f"{c['pm_samples_dropped']} dropped (hardware buffer overflowed "
                f"{c['pm_buffer_overflows']} times)" + (f"; {cost}" if cost else "")
            )
        lines += [f"GPU metrics: PM sampling missed {why}" for why in self._coverage_lines()]
        lines += [f"GPU metrics refused: {why}" for why in self._refused()]
        # One line per device and reason: a short capture window leaves every interval
        # metric without a value, which would otherwise be a dozen lines.
        grouped: dict[tuple[object, str], list[str]] = {}
        for device, d in sorted(pm.devices.items()) if pm is not None else ():
            why = f"not in {d.chip}'s PM sampling tables, or past one pass"
            if d.missing and d.started:
                grouped[(device, why)] = list(d.missing)
        for columns in self._sampler.devices if self._sampler else ():
            for name, why in self._nvml_missing(columns).items():
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
        spans = [(w.start, w.end) for w in windows]
        self._spans = spans  # PM sampling's samples, when the streams are read
        if self._sampler is None:
            return
        for columns in self._sampler.devices:
            self._outside_windows += columns.keep_only(spans)


def nvml_track(
    series: model.GpuCounterSeries, pm: PmSampling | None, from_pm: set[tuple[int, str]]
) -> model.GpuCounterSeries | None:
    """An NVML track as written beside PM sampling's (`from_pm`: their (device, name)):
    unchanged where PM sampling did not run on its GPU or it is an instant counter; None
    where PM sampling read the same quantity; else (a quantity PM sampling did not read
    there: one pass holds only so many, on an H100 occupancy, PCIe, NVLink) under its
    source's name, `SM occupancy % (NVML)`, off the GPU's interval grid that
    xpu_kernel_metrics places kernels on."""
    if not replaced_by_pm(series, pm):
        return series
    if (series.device, series.name) in from_pm:
        return None
    return dataclasses.replace(series, name=f"{series.name} (NVML)")


def replaced_by_pm(series: model.GpuCounterSeries, pm: PmSampling | None) -> bool:
    """An NVML track PM sampling stands for: its GPU ran PM sampling and it is an interval
    counter (GPM's or utilisation's).  One source of interval counters per GPU:
    xpu_kernel_metrics places kernels on the times of a GPU's interval counters, which two
    sources would mix (see nvml_track)."""
    if pm is None or series.device not in pm.started:
        return False
    interval = {*catalog.INTERVAL_COUNTER_NAMES, *(c.name for c in catalog.UTILIZATION_COUNTERS)}
    return series.name in interval


class KeptGpuMetrics(FinishedRun):
    """The counters a recording kept beside its streams, as a source for
    `record --from-streams` (the same events, metadata and summary lines), with PM
    sampling's from the kept streams (`pm_sampling`: the kept GPU source's, read before)."""

    name = "gpu_metrics"

    def __init__(
        self, directory: Path, pm_sampling: Callable[[], PmSampling | None] | None = None
    ) -> None:
        from collector.gpu_metrics import kept

        self._kept = kept.load(directory)
        self._pm_sampling = pm_sampling

    def _pm(self) -> PmSampling | None:
        pm = self._pm_sampling() if self._pm_sampling is not None else None
        return pm if pm is not None and pm.started else None

    def events(self) -> Iterable[model.Event]:
        from collector.gpu_metrics import kept

        pm = self._pm()
        if pm is None:
            yield from kept.events(self._kept)
            return
        pm_series = list(pm.series())
        from_pm = {(s.device, s.name) for s in pm_series}
        for event in kept.events(self._kept):
            if isinstance(event, model.GpuCounterSeries):
                track = nvml_track(event, pm, from_pm)
                if track is not None:
                    yield track
            else:
                yield event
        yield from pm_series

    def stats(self) -> Mapping[str, int]:
        pm = self._pm()
        return {**self._kept.stats, **(pm.counts if pm is not None else {})}

    def metadata(self) -> Mapping[str, model.ArgValue]:
        pm = self._pm()
        out = dict(self._kept.metadata)
        if pm is not None:
            # What record knew when the target ended lacked PM sampling's outcome.
            before = str(out.get("gpu_metrics_source", NONE)).split(",")
            out["gpu_metrics_source"] = source_names({PM_SAMPLING, *before} - {NONE})
        return out

    def summary_lines(self) -> list[str]:
        pm = self._pm()
        lines = list(self._kept.summary_lines)
        if pm is not None:
            cost = pm.cost_words()
            lines.append(
                f"GPU metrics: PM sampling on GPU {', '.join(map(str, sorted(pm.started)))}: "
                f"{pm.counts['pm_samples']} samples, {pm.counts['pm_samples_dropped']} dropped"
                + (f"; {cost}" if cost else "")
            )
        return lines
