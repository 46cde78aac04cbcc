"""The target's process tree as user space sees it: who is followed, names, memory maps.

The kernel side (bpf/process_tree.h) decides which tasks are sampled; this side keeps what
symbolization and the trace need about them, captured while they live: a maps snapshot per
process image (a new one after each exec), the command line, process and thread names.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from collector.model import ProcessInfo, ThreadInfo
from collector.symbolize import MapsSnapshot


@dataclass(frozen=True, slots=True)
class ProcessTree:
    """Which processes a source follows: `pids` and all their descendants (existing ones and
    those forked later), plus whatever `spawner` forks until `BccSource.target_started()` —
    the recorder passes its own pid so the target is followed from its first instruction."""

    pids: tuple[int, ...] = ()
    spawner: int | None = None

    @classmethod
    def spawned_by_self(cls) -> ProcessTree:
        return cls(spawner=os.getpid())


def descendants(roots: Iterable[int]) -> set[int]:
    """`roots` and every live process below them, from /proc/*/stat parent links."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised comm, which may itself hold spaces.
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found


def kernel_cpu_ns(pids: Iterable[int]) -> int:
    """The kernel-mode CPU time the live processes `pids` used so far, each with that of the
    children it reaped (/proc/PID/stat stime + cstime)."""
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[12]) + int(fields[14])) * tick_ns  # fields 15 and 17 of stat
    return total


def _read_cmdline(pid: int) -> tuple[str, ...]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ()
    return tuple(arg.decode("utf-8", "replace") for arg in raw.split(b"\0") if arg)


def _read_comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().rstrip("\n")
    except OSError:
        return ""


@dataclass(slots=True)
class _Process:
    pid: int
    parent: int | None = None
    name: str = ""
    cmdline: tuple[str, ...] = ()
    maps: MapsSnapshot | None = None
    stale: bool = True  # no snapshot of the current image yet (new, or just exec'd)
    threads: dict[int, str] = field(default_factory=dict)


class ProcessRegistry:
    """Per-process facts gathered from ring-buffer events, on the thread that drains it."""

    def __init__(self) -> None:
        self._processes: dict[int, _Process] = {}
        self.maps_missing = 0  # events whose process was gone before its maps were read

    def _get(self, pid: int) -> _Process:
        proc = self._processes.get(pid)
        if proc is None:
            proc = self._processes[pid] = _Process(pid)
        return proc

    def on_fork(self, child: int, parent: int) -> None:
        # `child` may be a thread of `parent`; it only becomes a process entry when an event
        # arrives with it as pid.  Remember the parent: until it execs, a forked child has
        # the parent's memory layout, which is the fallback when the child died too soon.
        if child != parent:
            self._get(child).parent = parent

    def on_exec(self, pid: int, comm: str) -> None:
        proc = self._get(pid)
        proc.stale = True
        proc.parent = None  # the parent's layout no longer applies
        proc.name = comm
        # The thread that exec'd is the main thread now, under the new program's name (a
        # thread track has one name: the one users expect is the program it ran last).
        if pid in proc.threads:
            proc.threads[pid] = comm

    def prefetch_maps(self, pid: int) -> None:
        """Read (or extend) the maps of a live process ahead of its events: a process that
        exits right after its last launch is gone before the drain reads its events, and its
        stacks would then have no maps to be symbolized with."""
        proc = self._get(pid)
        if proc.stale or proc.maps is None:
            self._read_image(proc)
        else:
            proc.maps.refresh()  # libraries mapped since (dlopen)

    @staticmethod
    def _read_image(proc: _Process) -> bool:
        """A first snapshot of the process's current image (maps, command line); False when
        the process is gone."""
        snapshot = MapsSnapshot(proc.pid)
        if not snapshot.refresh():
            return False
        proc.maps, proc.stale = snapshot, False
        proc.cmdline = _read_cmdline(proc.pid) or proc.cmdline
        # The main thread's name, not that of the thread whose event came first (a Python
        # thread the startup hook named, for one).
        proc.name = _read_comm(proc.pid) or proc.name
        return True

    def on_event(
        self, pid: int, tid: int, comm: str, user_addrs: Iterable[int] = ()
    ) -> MapsSnapshot | None:
        """Note a sample/launch of (pid, tid) and return the maps snapshot to symbolize it
        with, re-reading /proc/PID/maps when the image is new or an address is not covered."""
        proc = self._get(pid)
        proc.threads[tid] = comm
        if tid == pid or not proc.name:
            proc.name = comm
        if proc.stale and not self._read_image(proc):
            # Gone already: a forked child that had not exec'd had its parent's layout.
            proc.stale = False
            parent = self._processes.get(proc.parent) if proc.parent is not None else None
            proc.maps = parent.maps if parent is not None else None
        addrs = list(user_addrs)
        if proc.maps is not None and not proc.maps.covers(addrs):
            proc.maps.refresh()
        if proc.maps is None and addrs:
            self.maps_missing += 1
        return proc.maps

    def info_events(self) -> Iterator[ProcessInfo | ThreadInfo]:
        for proc in self._processes.values():
            if not proc.threads:
                continue  # a fork we heard of but never sampled
            yield ProcessInfo(proc.pid, proc.name, proc.cmdline)
            for tid, name in sorted(proc.threads.items()):
                yield ThreadInfo(proc.pid, tid, name)
