"""CUPTI PM sampling as the injection library wrote it (cupti_inject/src/pm_sampling.c):
PM_METRIC (the metric names), PM_DEVICE (each device's start, refusal or missing metric),
PM_SAMPLE (one metric's value over one sample) and the pm_* counters of its final flush.

Read by the GPU source while it reads the streams; the GPU counter source
(collector/recording/gpu_metrics.py) decides with it which source each GPU's counters come
from, and writes these as counter tracks (the catalog's names, units and scales)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from collector import model
from collector.gpu_metrics import catalog
from collector.sources.cupti_stream import Stream

# The library's final counters about PM sampling, summed over processes.
COUNTERS = (
    "pm_samples",
    "pm_samples_dropped",
    "pm_sample_gaps",
    "pm_buffer_overflows",
    "pm_samples_unevaluated",
    "pm_samples_short",
    # What it cost the program's processes: its thread's wall time starting devices (once)
    # and then in its rounds (CUPTI calls), that thread's CPU time, and the time sampling
    # ran (the rounds' share of it).
    "pm_start_ns",
    "pm_thread_busy_ns",
    "pm_thread_cpu_ns",
    "pm_sampling_span_ns",
)
# How the library mapped CUPTI's sample times onto CLOCK_MONOTONIC (pm_sampling_clock).
CLOCKS = {1: "monotonic", 2: "realtime", 3: "cupti", 4: "estimated"}

# A CUPTI status in a refusal (its CUptiResult number, which the library writes after the
# status's name), in words for the summary.
_HINTS = {
    35: "profiling is restricted to admin users (NVreg_RestrictProfilingToAdminUsers=1): "
    "run as root or allow it",
    40: "profiling is not allowed in this virtual machine",
    26: "the counters are held by another client (DCGM, Nsight, another profiled process)",
    27: "not supported on this GPU or driver",
}


def reason_words(reason: str) -> str:
    """A refusal as the library wrote it, with what its status means where known."""
    match = re.search(r"\((\d+)\)$", reason)
    hint = _HINTS.get(int(match.group(1))) if match else None
    return f"{reason}: {hint}" if hint else reason


@dataclass
class PmDevice:
    """What PM sampling did on one device (over every process that used it)."""

    chip: str = ""
    started: bool = False
    refused: list[str] = field(default_factory=list)  # reasons, first first
    missing: list[str] = field(default_factory=list)  # metrics its tables lacked


@dataclass
class PmSampling:
    """PM sampling of a recording: the devices, their samples, the counts."""

    devices: dict[int, PmDevice] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNTERS, 0))
    clock: str = ""
    wanted: bool = False  # a stream carried the metric list: the library was asked
    # (device, metric name) -> [(start ns, value)] of every process, in CUPTI's units.
    _samples: dict[tuple[int, str], list[tuple[np.ndarray, np.ndarray]]] = field(
        default_factory=dict
    )

    def add(self, stream: Stream) -> None:
        """One process's PM sampling rows."""
        metrics = stream.table("PM_METRIC")
        names = dict(zip(metrics["metric"], metrics["name"], strict=True))
        status = stream.table("PM_DEVICE")
        if metrics.rows or status.rows:
            self.wanted = True
        for device, chip, state, reason in zip(
            status["device"], status["chip"], status["status"], status["reason"], strict=True
        ):
            d = self.devices.setdefault(int(device), PmDevice())
            d.chip = chip or d.chip
            if state == "started":
                d.started = True
            elif state == "metric_missing":
                if reason not in d.missing:
                    d.missing.append(reason)
            elif reason not in d.refused:  # refused, or stopped mid-run
                d.refused.append(reason_words(reason))
        samples = stream.table("PM_SAMPLE")
        # The samples its rows hold: the pm_samples counter is written by the final flush,
        # which a process that crashed at exit never wrote (its samples are still here).
        decoded = 0
        if samples.rows:
            device = np.frombuffer(samples["device"], np.uint32)
            start = np.frombuffer(samples["start"], np.uint64).astype(np.int64)
            metric = np.frombuffer(samples["metric"], np.uint32)
            value = np.frombuffer(samples["value"], np.float64)
            decoded = len(np.unique(np.stack([device.astype(np.int64), start]), axis=1)[0])
            for dev in np.unique(device):
                for m in np.unique(metric[device == dev]):
                    name = names.get(int(m))
                    if name is None:
                        continue
                    rows = (device == dev) & (metric == m)
                    pair = (start[rows], value[rows])
                    self._samples.setdefault((int(dev), name), []).append(pair)
        counters = stream.table("COUNTER")
        last = dict(zip(counters["name"], counters["value"], strict=True))
        for key in COUNTERS:
            self.counts[key] += int(last.get(key, 0))
        if "pm_samples" not in last:
            self.counts["pm_samples"] += decoded
        clock = int(last.get("pm_sampling_clock", 0))
        if clock in CLOCKS:
            self.clock = CLOCKS[clock]

    def cost_words(self) -> str:
        """What PM sampling's thread took from the program, in the summary's words."""
        c = self.counts
        busy, span = c["pm_thread_busy_ns"], c["pm_sampling_span_ns"]
        if not span:
            return ""
        return (
            f"its thread: {c['pm_start_ns'] / 1e6:.0f} ms to start, then busy "
            f"{busy / 1e6:.1f} ms of {span / 1e9:.1f} s sampled ({100 * busy / span:.2f}%); "
            f"{c['pm_thread_cpu_ns'] / 1e6:.0f} ms CPU in all"
        )

    @property
    def started(self) -> set[int]:
        """The devices where PM sampling ran."""
        return {dev for dev, d in self.devices.items() if d.started}

    def series(
        self, spans: Sequence[tuple[int, int]] | None = None
    ) -> Iterator[model.GpuCounterSeries]:
        """A counter track per device and metric (the catalog's name, unit and scale); with
        `spans`, only the samples that start inside one (capture windows), the others counted
        as `pm_samples_outside_window`."""
        by_metric = {c.metric: c for c in catalog.PM_COUNTERS}
        outside: dict[int, int] = {}  # per device: its metrics share their samples
        for (device, metric), parts in sorted(self._samples.items()):
            counter = by_metric.get(metric)
            if counter is None:
                continue
            ts = np.concatenate([p[0] for p in parts])
            order = np.argsort(ts, kind="stable")
            ts = ts[order]
            values = np.concatenate([p[1] for p in parts])[order] * counter.scale
            if spans is not None:
                keep = np.zeros(len(ts), bool)
                for lo, hi in spans:
                    keep |= (ts >= lo) & (ts <= hi)
                outside[device] = max(outside.get(device, 0), int((~keep).sum()))
                ts, values = ts[keep], values[keep]
            if len(ts):
                yield model.GpuCounterSeries(device, counter.name, counter.unit, ts, values)
        if spans is not None:
            self.counts["pm_samples_outside_window"] = sum(outside.values())
