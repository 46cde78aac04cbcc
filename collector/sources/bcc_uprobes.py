"""Launch uprobes: the user stack of each CUDA launch in the target's process tree, via bcc.

Two kinds of probe (bpf/launch_uprobes.bpf.c):
- the injection library's marker `xpu_perf_launch_marker(uint64_t correlation_id,
  uint32_t api_id)`, called from its CUPTI API callback: each stack carries the exact
  correlation id of its launch and is joined to that launch's `cuda_api` slice;
- when no injection library is loaded, `cudaLaunchKernel` / `cuLaunchKernel` in whatever
  CUDA runtime / driver the target maps: stacks without correlation ids, written as
  zero-length `cuda_api` slices carrying the stack.

Uprobes are per file (inode), so a probe attached after the target mapped the library still
fires in it; libraries given by name are found by scanning the followed processes' maps.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from collector.model import CAT_CUDA_API, NONE, Event, SliceBatch, Stack
from collector.sources.bcc_process_tree import ProcessTree, descendants
from collector.sources.bcc_source import (
    EV_EXIT,
    EV_FORK,
    EV_LAUNCH,
    BccSource,
    comm_str,
    stack_words,
)
from collector.sources.slice_rows import SliceRows
from collector.symbolize import MapsSnapshot, Symbolizer, parse_maps

MARKER_SYMBOL = "xpu_perf_launch_marker"
MAX_API_PROBES = 8  # on_launch_api_1..8 in the BPF program
_SCAN_INTERVAL_S = 0.25

_LAUNCH_HEADER = struct.Struct("<IIIIQ16sQIiQ")


@dataclass(frozen=True, slots=True)
class LaunchProbe:
    """`symbol` in `library`: an absolute path, or a file-name prefix (e.g. "libcudart.so")
    looked for in the followed processes' maps.  A marker probe reads (correlation id,
    api id) from the first two arguments."""

    symbol: str
    library: str
    marker: bool = False


CUDA_LAUNCH_PROBES = (
    LaunchProbe("cudaLaunchKernel", "libcudart.so"),
    LaunchProbe("cuLaunchKernel", "libcuda.so"),
)


def marker_probe(injection_library: str) -> LaunchProbe:
    return LaunchProbe(MARKER_SYMBOL, injection_library, marker=True)


@dataclass(frozen=True, slots=True)
class LaunchHit:
    """One entry into a probed function, with the caller's stack (root first)."""

    pid: int
    tid: int
    ts: int
    symbol: str
    correlation_id: int | None
    api_id: int | None
    stack: Stack


class BccLaunchUprobes(BccSource):
    """User stacks at CUDA launches (or any probed function) in the target's process tree."""

    name = "ebpf_launch"
    program = "launch_uprobes.bpf.c"
    ringbuf_pages = 4096  # 16 MiB: launch-bound loops reach tens of thousands of launches/s

    def __init__(self, probes: Sequence[LaunchProbe]) -> None:
        super().__init__()
        markers = [p for p in probes if p.marker]
        apis = [p for p in probes if not p.marker]
        if len(markers) > 1 or len(apis) > MAX_API_PROBES:
            raise ValueError(f"at most one marker and {MAX_API_PROBES} API probes")
        # Slot 0 is the marker entry point; API probes take slots 1..8.
        self._slots: dict[int, LaunchProbe] = {0: markers[0]} if markers else {}
        self._slots.update({i + 1: p for i, p in enumerate(apis)})
        self.attached: dict[int, list[str]] = {slot: [] for slot in self._slots}
        self.attach_errors: list[str] = []
        self._live: set[int] = set()
        self._scanned: set[int] = set()
        self._last_scan = 0.0
        self._raw: list[tuple[int, int, int, int, int, int, MapsSnapshot | None, bytes]] = []
        self._symbolizer = Symbolizer()

    # --- attaching ---------------------------------------------------------------------

    def start(self, tree: ProcessTree | None = None) -> None:
        if tree is not None and tree.pids:
            self._live.update(descendants(tree.pids))
        super().start(tree)

    def target_started(self, pid: int) -> None:
        super().target_started(pid)
        self._live.add(pid)

    def attach(self) -> None:
        for slot, probe in self._slots.items():
            if os.path.isabs(probe.library):
                self._attach(slot, probe.library)
        self._scan_maps()

    def _attach(self, slot: int, path: str) -> None:
        probe = self._slots[slot]
        if path in self.attached[slot]:
            return
        fn = "on_launch_marker" if slot == 0 else f"on_launch_api_{slot}"
        try:
            self.loaded.attach_uprobe(
                name=path.encode(), sym=probe.symbol.encode(), fn_name=fn.encode()
            )
        except Exception as exc:  # bcc raises bare Exception when the symbol is absent
            self.attach_errors.append(f"{probe.symbol} in {path}: {exc}")
            return
        self.attached[slot].append(path)

    def _pending_by_name(self) -> list[tuple[int, LaunchProbe]]:
        return [
            (slot, p)
            for slot, p in self._slots.items()
            if not os.path.isabs(p.library) and not self.attached[slot]
        ]

    def periodic(self) -> None:
        now = time.monotonic()
        if now - self._last_scan >= _SCAN_INTERVAL_S:
            self._last_scan = now
            self._scan_maps()
            for pid in list(self._live):
                self.registry.prefetch_maps(pid)

    def _scan_maps(self) -> None:
        """Attach name-given probes to matching libraries the followed processes mapped."""
        pending = self._pending_by_name()
        if not pending:
            return
        for pid in list(self._live):
            try:
                text = Path(f"/proc/{pid}/maps").read_text()
            except OSError:
                self._live.discard(pid)
                continue
            for mapping in parse_maps(text):
                if not mapping.file_backed:
                    continue
                name = os.path.basename(mapping.path)
                for slot, probe in pending:
                    if name.startswith(probe.library):
                        self._attach(slot, mapping.path)

    def on_task_event(self, kind: int, pid: int, tid: int) -> None:
        if kind == EV_FORK and _is_process(pid):
            self._live.add(pid)
        elif kind == EV_EXIT:
            self._live.discard(pid)

    # --- records -----------------------------------------------------------------------

    def on_data_record(self, kind: int, data: bytes) -> None:
        if kind != EV_LAUNCH:
            return
        _, pid, tid, slot, ts, comm, correlation_id, api_id, ubytes, return_addr = (
            _LAUNCH_HEADER.unpack_from(data)
        )
        ustack = stack_words(data, _LAUNCH_HEADER.size, ubytes)
        if return_addr and len(ustack) >= 1 and (len(ustack) < 2 or ustack[1] != return_addr):
            ustack.insert(1, return_addr)  # the caller the frame-pointer walk skipped
        maps = self.registry.on_event(pid, tid, comm_str(comm), ustack)
        self._raw.append((pid, tid, ts, slot, correlation_id, api_id, maps, ustack.tobytes()))

    def hits(self) -> Iterator[LaunchHit]:
        """Every probe hit, symbolized (call after stop())."""
        stacks: dict[tuple[int, bytes], Stack] = {}
        for pid, tid, ts, slot, correlation_id, api_id, maps, ustack in self._raw:
            key = (id(maps), ustack)
            stack = stacks.get(key)
            if stack is None:
                words = list(struct.unpack(f"<{len(ustack) // 8}Q", ustack))
                frames = self._symbolizer.user_frames(maps, words)
                stack = stacks[key] = Stack(tuple(reversed(frames)))
            marker = slot == 0
            yield LaunchHit(
                pid,
                tid,
                ts,
                self._slots[slot].symbol,
                correlation_id if marker else None,
                api_id if marker else None,
                stack,
            )

    def events(self) -> Iterator[Event]:
        """Names, then the hits as zero-length `cuda_api` slices carrying their stacks, a
        batch per process: the form for runs without the injection library.  With it, join
        the hits to the CUPTI API slices instead (`with_launch_stacks`)."""
        yield from self.registry.info_events()
        by_pid: dict[int, SliceRows] = {}
        for hit in self.hits():
            rows = by_pid.get(hit.pid)
            if rows is None:
                rows = by_pid[hit.pid] = SliceRows()
            rows.cpu(
                hit.pid,
                hit.tid,
                hit.ts,
                0,
                hit.symbol,
                CAT_CUDA_API,
                {},
                NONE if hit.correlation_id is None else hit.correlation_id,
                hit.stack,
            )
        for rows in by_pid.values():
            yield rows.batch()

    def stats(self) -> dict[str, int]:
        counters = self.kernel_counters()
        return {
            "stacks": len(self._raw),
            "lost_ringbuf_full": counters.get("lost_ringbuf_full", 0),
            "user_stack_errors": counters.get("user_stack_errors", 0),
            "user_stacks_truncated": counters.get("user_stacks_truncated", 0),
            "untracked_forks": counters.get("untracked_forks", 0),
            "maps_missing": self.registry.maps_missing,
            "unresolved_frames": self._symbolizer.unresolved_frames,
            **self._symbolizer.perf_map_counts,
            "probe_attach_errors": len(self.attach_errors),
            "decode_errors": self.decode_errors,
        }


def with_launch_stacks(
    events: Iterable[Event], hits: Iterable[LaunchHit], counts: dict[str, int] | None = None
) -> Iterator[Event]:
    """Give each `cuda_api` slice of the batches the marker stack with its (pid,
    correlation id).

    `counts` (if given) receives `launch_stacks_joined` and `launch_stacks_unmatched`.
    """
    by_launch = {(h.pid, h.correlation_id): h.stack for h in hits if h.correlation_id is not None}
    joined = 0
    for ev in events:
        if isinstance(ev, SliceBatch):
            ev, n = _join_batch(ev, by_launch)
            joined += n
        yield ev
    if counts is not None:
        counts["launch_stacks_joined"] = joined
        counts["launch_stacks_unmatched"] = len(by_launch)


def _join_batch(
    batch: SliceBatch, by_launch: dict[tuple[int, int], Stack]
) -> tuple[SliceBatch, int]:
    """`batch` with the stacks of `by_launch` (taken out of it) on its API rows without one."""
    cpu = batch.cpu
    if CAT_CUDA_API not in cpu.categories:
        return batch, 0
    api = cpu.categories.index(CAT_CUDA_API)
    column = list(cpu.stack) if cpu.stack is not None else [NONE] * cpu.rows
    stacks = list(cpu.stacks)
    joined = 0
    for i, (stack, category, corr) in enumerate(
        zip(column, cpu.category, cpu.correlation_id, strict=True)
    ):
        if stack == NONE and category == api and corr != NONE:
            found = by_launch.pop((batch.pid, int(corr)), None)
            if found is not None:
                column[i] = len(stacks)
                stacks.append(found)
                joined += 1
    cpu = dataclasses.replace(cpu, stack=column, stacks=stacks)
    return dataclasses.replace(batch, cpu=cpu), joined


def _is_process(pid: int) -> bool:
    """True when `pid` is a thread-group leader (fork events also report new threads)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Tgid:"):
                    return int(line.split()[1]) == pid
    except OSError:
        pass
    return False


__all__ = [
    "CUDA_LAUNCH_PROBES",
    "MARKER_SYMBOL",
    "BccLaunchUprobes",
    "LaunchHit",
    "LaunchProbe",
    "marker_probe",
    "with_launch_stacks",
]
