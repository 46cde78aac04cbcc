"""The file system the streams are written to (TMPDIR), watched while the target runs.

The libraries in the target append their streams there; when it fills up, their writes fail
(ENOSPC) and so does the final write of their counters, which would have said what was
lost: a stream then just stops, or is empty, and the recording looked complete ("lost:
transport=0") or blamed a kill.  The libraries now count the rows they could not write and
rewrite that count in place, in a block written first (UNWRITTEN, protos/cupti_stream.def),
so the number reaches record anyway.  And record looks at the free space every POLL_S while
the target runs and once after, and when it ran out while streams were cut short (without their
final counters, or unreadable), it says so: from when, which streams, and that what came
after is lost: how many samples, waits and GPU records.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from collector import model

POLL_S = 0.05
# Less free than this is "full": about what a library's flush of one period (a chunk of
# samples or GPU records) needs, so a write then fails (ENOSPC) or soon will.
FULL_BYTES = 64 << 10


def free_bytes(directory: Path) -> int | None:
    """Bytes an unprivileged writer can still use under `directory` (None: unknown)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class StreamsDisk:
    """A RecordSource with no events: the streams' file system watched while the target
    runs (metadata `disk_full`, `disk_full_after_ns`, `disk_free_min_bytes`)."""

    name = "disk"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.free_min: int | None = None
        self.full_at_ns: int | None = None  # CLOCK_MONOTONIC of the first poll that found it full
        self.started_ns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll(self) -> None:
        free = free_bytes(self.directory)
        if free is None:
            return
        self.free_min = free if self.free_min is None else min(self.free_min, free)
        if free < FULL_BYTES and self.full_at_ns is None:
            self.full_at_ns = time.monotonic_ns()

    # RecordSource
    def target_env(self) -> Mapping[str, str]:
        return {}

    def start(self) -> None:
        self.started_ns = time.monotonic_ns()
        self.poll()
        self._thread = threading.Thread(target=self._run, name="xpu-perf-disk", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.poll()

    def target_started(self, pid: int) -> None:
        self.started_ns = time.monotonic_ns()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.poll()  # the streams' last writes, at the processes' exit

    def events(self) -> Iterable[model.Event]:
        return ()

    def stats(self) -> Mapping[str, int]:
        after = self.full_at_ns - self.started_ns if self.full_at_ns is not None else 0
        return {
            "full": int(self.full_at_ns is not None),
            "full_after_ns": max(after, 0),  # since the target started
            "free_min_bytes": self.free_min if self.free_min is not None else -1,
        }


def cut_streams(stats: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """Per stream source (cupti, cpu): the streams cut short, without their final counters
    or not even readable."""
    cut = {}
    for name in ("cupti", "cpu"):
        counts = stats.get(name, {})
        n = counts.get("streams_without_counters", 0) + counts.get("streams_unreadable", 0)
        if n:
            cut[name] = n
    return cut


def unwritten(stats: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """What the libraries counted as not written (their UNWRITTEN blocks, which survive a
    full disk): CPU samples, waits, GPU records."""
    cpu, cupti = stats.get("cpu", {}), stats.get("cupti", {})
    return {
        "CPU samples": cpu.get("unwritten_cpu_samples", 0),
        "waits": cpu.get("unwritten_waits", 0),
        "GPU records": cupti.get("unwritten_gpu_records", 0),
    }


def disk_full(stats: Mapping[str, Mapping[str, int]]) -> bool:
    """Whether the recording lost data to a full file system: it ran out of space while
    streams were cut short or could not write some of their rows."""
    cut = bool(cut_streams(stats)) or any(unwritten(stats).values())
    return bool(stats.get("disk", {}).get("full")) and cut


def disk_summary_lines(stats: Mapping[str, Mapping[str, int]], directory: Path) -> list[str]:
    """The summary's line when the streams' file system filled up and cut streams short, or
    when the libraries could not write some rows for another reason (a write error)."""
    lost = ", ".join(f"{n} {what}" for what, n in unwritten(stats).items())
    if not disk_full(stats):
        if not any(unwritten(stats).values()):
            return []
        return [
            f"error: the streams ({directory.parent}, TMPDIR) could not be written in full: "
            f"{lost} are not in the trace (write errors the processes counted)"
        ]
    after = stats["disk"].get("full_after_ns", 0) / 1e9
    which = {"cupti": "GPU", "cpu": "CPU"}
    cut = ", ".join(f"{n} {which[name]}" for name, n in cut_streams(stats).items()) or "no"
    return [
        f"error: the file system of the streams ({directory.parent}, TMPDIR) was full "
        f"(under {FULL_BYTES >> 10} KiB free) {after:.1f} s after the target started: "
        f"{cut} streams stop there; lost to the full disk: {lost} (what the processes "
        "could not write, counted by them); free space there or point TMPDIR at a larger "
        "file system"
    ]
