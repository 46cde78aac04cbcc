"""--max-size: how much the target's processes have recorded so far, and when that reached
the limit (the run is then stopped as --duration stops it)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from collector.recording.source import SizedSource

# How often `record` measures what the target has recorded so far.
SIZE_POLL_S = 0.2


def directory_bytes(directory: Path) -> int:
    """Bytes of the files in `directory` and its uid-N/ directories (the target's processes
    write them as it runs; one that became another user writes into uid-N/)."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            with contextlib.suppress(OSError):  # a file may go between listing and stat
                if entry.is_dir(follow_symlinks=False):
                    total += directory_bytes(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
    return total


@dataclass
class SizeLimit:
    """--max-size: the recorded data's limit, and when the run reached it."""

    max_bytes: int
    started_ns: int = 0  # CLOCK_MONOTONIC when the target was started
    cut_at_ns: int | None = None  # CLOCK_MONOTONIC when the recorded data reached max_bytes
    bytes_at_cut: int = 0
    # time.monotonic() of the next measurement (0: at the first poll)
    _next_measure: float = field(default=0.0, init=False, repr=False)

    @property
    def reached(self) -> bool:
        return self.cut_at_ns is not None

    def poll(self, sources: Sequence[SizedSource]) -> None:
        """Measure the sources' files every SIZE_POLL_S until they reach the limit, and
        note when they did."""
        if self.reached or time.monotonic() < self._next_measure:
            return
        self._next_measure = time.monotonic() + SIZE_POLL_S
        recorded = sum(s.recorded_bytes() for s in sources)
        if recorded >= self.max_bytes:
            self.cut_at_ns = time.monotonic_ns()
            self.bytes_at_cut = recorded

    def metadata(self) -> dict[str, int]:
        cut = self.cut_at_ns is not None
        return {
            "max_size_bytes": self.max_bytes,
            "cut_by_max_size": int(cut),
            "cut_at_ns": self.cut_at_ns or 0,  # trace clock (CLOCK_MONOTONIC); 0: not cut
            "cut_recorded_bytes": self.bytes_at_cut,
        }

    def summary(self) -> str | None:
        if self.cut_at_ns is None:
            return None
        after = (self.cut_at_ns - self.started_ns) / 1e9
        return (
            f"recording cut by --max-size {self.max_bytes / 1e6:g} MB {after:.1f} s after the "
            f"target started (recorded data {self.bytes_at_cut / 1e6:.1f} MB): the target was "
            "stopped there, as by --duration"
        )
