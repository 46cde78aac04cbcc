"""The processes of the target's tree as record sees them from outside while it runs, so the
summary can name those that left no stream (the sampler library not loaded: the environment
cleared, a static binary, a user who could not read it).

A thread walks the tree from the target every SCAN_S through /proc/PID/task/TID/children
(only the tree is read, not all of /proc), noting each process's name.  A process that lives
less than SCAN_S may be missed, and one reparented away from the tree (its parent ended
first) is followed only if it was seen before.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

SCAN_S = 0.05


def _children(pid: int) -> list[int]:
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _name(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return None


class ProcessTreeWatch:
    """The target's tree, scanned on a thread of its own from `start(pid)` to `stop()`;
    `seen` maps each pid to the names it had (one per image)."""

    def __init__(self, interval_s: float = SCAN_S) -> None:
        self.interval_s = interval_s
        self.seen: dict[int, list[str]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, root: int) -> None:
        self._thread = threading.Thread(target=self._run, args=(root,), daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self, root: int) -> None:
        while True:
            self.scan(root)
            if self._stop.wait(self.interval_s):
                return

    def scan(self, root: int) -> None:
        """One walk from root and from every process seen before (still alive ones keep
        their children in view after their parent ended)."""
        todo = [root, *self.seen]
        visited: set[int] = set()
        while todo:
            pid = todo.pop()
            if pid in visited:
                continue
            visited.add(pid)
            name = _name(pid)
            if name is None:
                continue
            names = self.seen.setdefault(pid, [])
            if name not in names:
                names.append(name)
            todo += _children(pid)


def not_recorded(seen: dict[int, list[str]], recorded: set[int]) -> list[str]:
    """'pid N (name)' for each process seen that wrote no stream in any of its images."""
    missing = sorted(pid for pid in seen if pid not in recorded)
    return [f"pid {pid} ({'/'.join(seen[pid])})" for pid in missing]
