"""The sampling thread: every period, each GPU's counters read through its readers
(choice.DeviceSource), kept in columns until the recording ends.

It runs in `record`'s own process, not in the target: nothing is injected and the target's
threads never wait for it.  Times are CLOCK_MONOTONIC, the clock of the CUPTI records.  A
GPM value covers the interval between two samples, so it is kept at the interval's start
(a counter track's value holds from its time to the next one); an instant counter at its
read."""

from __future__ import annotations

import math
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Sequence

from collector import model
from collector.gpu_metrics.catalog import Counter
from collector.gpu_metrics.choice import DeviceSource
from collector.gpu_metrics.nvml_readers import error_words
from collector.window_control import WindowState

# Consecutive failed reads of one device's GPM sample after which its GPM reads stop (a
# lost GPU, counters taken by another client mid-run): its NVML counters go on.
MAX_FAILED_READS = 20


def monotonic_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class DeviceColumns:
    """One device's samples: a time column per reader and a value column per counter."""

    def __init__(self, source: DeviceSource) -> None:
        self.source = source
        self.gpm_counters: Sequence[Counter] = source.gpm.counters if source.gpm else ()
        self.instant_counters: Sequence[Counter] = source.instant.counters
        self.gpm_ts = array("q")
        self.gpm_values = [array("d") for _ in self.gpm_counters]
        self.instant_ts = array("q")
        self.instant_values = [array("d") for _ in self.instant_counters]
        self.interval_start: int | None = None  # the previous GPM sample's time
        self.failed_reads = 0
        self.read_errors = 0
        self.gpm_stopped: str | None = None  # why GPM reads stopped mid-run

    def series(self) -> Iterator[model.GpuCounterSeries]:
        """A counter track per counter with at least one value."""
        columns = [
            *((c, self.gpm_ts, v) for c, v in zip(self.gpm_counters, self.gpm_values, strict=True)),
            *(
                (c, self.instant_ts, v)
                for c, v in zip(self.instant_counters, self.instant_values, strict=True)
            ),
        ]
        for counter, ts, values in columns:
            if any(map(math.isfinite, values)):
                yield model.GpuCounterSeries(
                    self.source.device, counter.name, counter.unit, ts, values
                )

    def missing(self) -> dict[str, str]:
        """Counters without a single value, with the reason of their first failure."""
        failures = {**self.source.instant.failures}
        if self.source.gpm is not None:
            failures.update(self.source.gpm.failures)
        out = {}
        for counter, values in (
            *zip(self.gpm_counters, self.gpm_values, strict=True),
            *zip(self.instant_counters, self.instant_values, strict=True),
        ):
            if not any(map(math.isfinite, values)):
                out[counter.name] = failures.get(counter.name, "no value")
        return out

    def keep_only(self, spans: Sequence[tuple[int, int]]) -> int:
        """Drop the samples whose time is outside every span; returns how many went."""
        dropped = 0
        for ts, columns in ((self.gpm_ts, self.gpm_values), (self.instant_ts, self.instant_values)):
            keep = [i for i, t in enumerate(ts) if any(a <= t <= b for a, b in spans)]
            dropped += len(ts) - len(keep)
            kept_ts = array("q", (ts[i] for i in keep))
            ts[:] = kept_ts
            for values in columns:
                values[:] = array("d", (values[i] for i in keep))
        return dropped


class CounterSampler:
    """Reads every device's counters every `period_ns` on a thread of its own."""

    def __init__(
        self,
        devices: Sequence[DeviceSource],
        period_ns: int,
        clock: Callable[[], int] = monotonic_ns,
    ) -> None:
        self.devices = [DeviceColumns(d) for d in devices]
        self.period_ns = period_ns
        self.clock = clock
        self.ticks = 0
        self.late_ticks = 0  # periods skipped because a read took longer than a period
        self.closed_ticks = 0  # periods not read: no capture window open
        self.windows: WindowState | None = None  # capture windows to follow, if any
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Open the first intervals and read every period on a thread from now on."""
        self.begin()
        self._thread = threading.Thread(target=self._run, name="xpu-perf gpu metrics", daemon=True)
        self._thread.start()

    def begin(self) -> None:
        """Open each device's first GPM interval now; tick() reads from here on."""
        for columns in self.devices:
            if columns.source.gpm is not None:
                # The construction's sample opened the first interval; restart it now so
                # the first interval does not reach back before the recording.
                self._read_gpm(columns, self.clock(), keep=False)

    def stop(self) -> None:
        """Stop after a last read (the target has ended: its last interval closes now)."""
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.tick()

    def _run(self) -> None:
        next_at = self.clock() + self.period_ns
        while not self._stop.wait(max(0, next_at - self.clock()) / 1e9):
            self.tick()
            next_at += self.period_ns
            now = self.clock()
            if now > next_at:
                missed = (now - next_at) // self.period_ns + 1
                self.late_ticks += missed
                next_at += missed * self.period_ns

    def tick(self) -> None:
        """One read of every device (none while the capture windows are closed)."""
        windows = self.windows
        if windows is not None and not (windows.tree_open or windows.process_windows > 0):
            self.closed_ticks += 1
            for columns in self.devices:
                columns.interval_start = None  # no GPM interval across closed time
            return
        self.ticks += 1
        for columns in self.devices:
            now = self.clock()
            if columns.source.gpm is not None and columns.gpm_stopped is None:
                self._read_gpm(columns, now, keep=True)
            columns.instant_ts.append(now)
            for values, value in zip(
                columns.instant_values, columns.source.instant.read(), strict=True
            ):
                values.append(value)

    def _read_gpm(self, columns: DeviceColumns, now: int, keep: bool) -> None:
        gpm = columns.source.gpm
        assert gpm is not None
        try:
            values = gpm.read()
        except Exception as exc:  # an NVMLError: counted, this interval is lost
            columns.read_errors += 1
            columns.failed_reads += 1
            columns.interval_start = None
            if columns.failed_reads >= MAX_FAILED_READS:
                columns.gpm_stopped = error_words(exc)
            return
        columns.failed_reads = 0
        start, columns.interval_start = columns.interval_start, now
        if keep and start is not None:
            columns.gpm_ts.append(start)
            for column, value in zip(columns.gpm_values, values, strict=True):
                column.append(value)
