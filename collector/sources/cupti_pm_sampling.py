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
    # Per device: the samples' [start, end) and the GPU ops' [start, end), of every
    # process: what the counters cover of the time the GPU worked.
    _sample_spans: dict[int, list[np.ndarray]] = field(default_factory=dict)
    _work: dict[int, list[np.ndarray]] = field(default_factory=dict)

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
            device = np.frombuffer(samples.numbers("device"), np.uint32)
            start = np.frombuffer(samples.numbers("start"), np.uint64).astype(np.int64)
            metric = np.frombuffer(samples.numbers("metric"), np.uint32)
            value = np.frombuffer(samples.numbers("value"), np.float64)
            end = np.frombuffer(samples.numbers("end"), np.uint64).astype(np.int64)
            spans = np.unique(np.stack([device.astype(np.int64), start, end], axis=1), axis=0)
            decoded = len(np.unique(spans[:, :2], axis=0))
            for dev in np.unique(spans[:, 0]):
                self._sample_spans.setdefault(int(dev), []).append(spans[spans[:, 0] == dev, 1:])
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

    def add_gpu_work(self, device: np.ndarray, start: np.ndarray, end: np.ndarray) -> None:
        """One process's GPU ops (kernels, copies, sets: what the counters should cover)."""
        for dev in np.unique(device):
            rows = device == dev
            self._work.setdefault(int(dev), []).append(np.stack([start[rows], end[rows]], 1))

    def coverage(self, interval_ns: int) -> list[PmCoverage]:
        """Per device where sampling ran: how much of the GPU's working time no sample
        covers (before the first, after the last, in gaps) and how much only samples far
        longer than the interval cover (their values are means over all of such a sample;
        a device's first sample can run far past the interval)."""
        out = []
        for device in sorted(self.started):
            work = _union(self._work.get(device, []))
            samples = _union(self._sample_spans.get(device, []))
            if not len(work):
                continue
            spans = self._sample_spans.get(device, [])
            fine = _union([s[s[:, 1] - s[:, 0] <= 2 * interval_ns] for s in spans])
            work_ns = int((work[:, 1] - work[:, 0]).sum())
            uncovered = _minus(work, samples)
            coarse = _minus(_minus(work, fine), uncovered)
            out.append(
                PmCoverage(
                    device,
                    work_ns,
                    int((uncovered[:, 1] - uncovered[:, 0]).sum()),
                    int((coarse[:, 1] - coarse[:, 0]).sum()),
                    _spans(uncovered, samples, int(work[0, 0])),
                    int(samples[0, 0]) - int(work[0, 0]) if len(samples) else None,
                    max((int((s[:, 1] - s[:, 0]).max()) for s in spans if len(s)), default=0),
                )
            )
        return out

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


@dataclass(frozen=True)
class PmCoverage:
    """What PM sampling's samples cover of one device's GPU work (its ops' union)."""

    device: int
    work_ns: int
    uncovered_ns: int  # GPU work no sample covers
    coarse_ns: int  # GPU work covered only by samples longer than twice the interval
    # The uncovered stretches of work, (from, to) ns after the device's first op, largest first.
    uncovered_spans: list[tuple[int, int]]
    first_sample_after_ns: int | None  # the first sample's start after the first op (None: none)
    longest_sample_ns: int

    def words(self, interval_ns: int) -> str:
        """One line for the summary, or "" when the samples cover the work finely."""
        parts = []
        if self.uncovered_ns:
            where = ", ".join(f"{a / 1e9:.2f}-{b / 1e9:.2f} s" for a, b in self.uncovered_spans[:3])
            why = ""
            if self.first_sample_after_ns is None:
                why = " (no sample at all)"
            elif self.first_sample_after_ns > 0 and self.uncovered_spans[0][0] == 0:
                why = " (sampling started after the first GPU op)"
            parts.append(
                f"{self.uncovered_ns / 1e9:.3f} s of GPU work had no sample{why}, at {where} "
                "after the first GPU op"
            )
        if self.coarse_ns:
            parts.append(
                f"{self.coarse_ns / 1e9:.3f} s only in samples far longer than the "
                f"{interval_ns / 1e6:g} ms interval (up to {self.longest_sample_ns / 1e9:.2f} s: "
                "one mean over the whole sample)"
            )
        if not parts:
            return ""
        return f"GPU {self.device}: of {self.work_ns / 1e9:.3f} s of GPU work, " + "; ".join(parts)


def _union(parts: Sequence[np.ndarray]) -> np.ndarray:
    """[start, end) rows merged into disjoint sorted intervals."""
    rows = np.concatenate(parts) if parts else np.zeros((0, 2), np.int64)
    rows = rows[rows[:, 1] > rows[:, 0]]
    if not len(rows):
        return np.zeros((0, 2), np.int64)
    rows = rows[np.argsort(rows[:, 0], kind="stable")]
    reach = np.maximum.accumulate(rows[:, 1])
    opens = np.ones(len(rows), bool)
    opens[1:] = rows[1:, 0] > reach[:-1]
    first = np.flatnonzero(opens)
    last = np.append(first[1:], len(rows)) - 1
    return np.stack([rows[first, 0], reach[last]], 1)


def _minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The parts of disjoint sorted intervals `a` that no interval of `b` covers."""
    if not len(a):
        return a
    edges = np.unique(np.concatenate([a.ravel(), b.ravel()]))
    mid = (edges[:-1] + edges[1:]) / 2  # a point inside each elementary piece

    def inside(intervals: np.ndarray) -> np.ndarray:
        if not len(intervals):
            return np.zeros(len(mid), bool)
        i = np.searchsorted(intervals[:, 0], mid, side="right") - 1
        return (i >= 0) & (mid < intervals[np.maximum(i, 0), 1])

    keep = inside(a) & ~inside(b)
    return _union([np.stack([edges[:-1][keep], edges[1:][keep]], 1)])


def _spans(uncovered: np.ndarray, samples: np.ndarray, origin: int) -> list[tuple[int, int]]:
    """The uncovered work grouped by the gap between samples it falls in (before the first,
    between two, after the last): each gap's first start to last end, from the origin, the
    gaps holding the most uncovered work first."""
    if not len(uncovered):
        return []
    gap = np.searchsorted(samples[:, 0], uncovered[:, 0], side="right") if len(samples) else 0
    gap = np.broadcast_to(gap, len(uncovered))
    _, first = np.unique(gap, return_index=True)
    last = np.append(first[1:], len(uncovered)) - 1
    held = np.add.reduceat(uncovered[:, 1] - uncovered[:, 0], first)
    order = np.argsort(-held, kind="stable")
    return [
        (int(uncovered[first[i], 0]) - origin, int(uncovered[last[i], 1]) - origin) for i in order
    ]
