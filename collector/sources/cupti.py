"""CUPTI stream source: the injection library's per-process streams → collector.model events.

- GPU ops (kernels, copies, sets, syncs) on their device/stream tracks;
- CUDA API calls as `cuda_api` slices on the calling thread, each with its launch stack;
- a flow from every API call to each GPU op it caused (a graph launch → every kernel of it);
  GPU records carry the outermost API's correlation id, or a nested driver call's, which the
  stream's API_ALIAS rows map back to the runtime call;
- NVTX ranges/markers on the thread that made them;
- counts (records per kind, CUPTI and transport drops, GPU ops without an API call, launches
  without a stack) in `counts`, for the trace metadata and the end-of-record summary.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from collector import model
from collector.sources.cupti_launch_stacks import stream_stacks
from collector.sources.cupti_stream import Stream, process_events, read_streams
from collector.symbolize import Symbolizer, demangle

STREAM_GLOB = "cupti-*.xpstream"
_MEMCPY_KINDS = {
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
}
_SYNC_KINDS = {
    1: "cudaEventSynchronize",
    2: "cudaStreamWaitEvent",
    3: "cudaStreamSynchronize",
    4: "cudaDeviceSynchronize",
}
_MARKER_INSTANT, _MARKER_START, _MARKER_END = 1, 2, 4
_LAUNCH_PREFIXES = (
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuLaunchKernel",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuLaunchGrid",
)
_NO_ID = 0xFFFFFFFF  # the library's NO_ID: a sync op's stream or device not known
_PEER_COPY = 10
_KERNEL_ARGS = (
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "shared_memory",
)
# Frames of these libraries do not count as a launch site (the stack criterion).
CUDA_LIBRARY_MARKERS = ("libcuda.so", "libcupti.so", "libcudart.so", "libxpu_perf_cupti.so")


REPORTED_COUNTS = (
    "streams",
    "records_kernel",
    "records_memcpy",
    "records_memset",
    "records_sync",
    "records_api",
    "records_marker",
    "cupti_dropped_records",
    "transport_dropped_rows",
    "gpu_ops",
    "gpu_ops_with_flow",
    "gpu_ops_without_api",
    "gpu_ops_matched_via_alias",
    "launches",
    "launches_without_stack",
    "launches_with_user_frame",
    "stacks_unique",
    "stack_table_full",
    "python_guard_failures",
    "streams_truncated",
    "streams_without_counters",
    "streams_python_unsupported",
    "python_unsupported_minor",  # CPython 3.x without Python frames (0: none)
    "cupti_delivered_kernel",
    "windows",  # capture windows recorded (record --capture-range / --delay), all processes
    "windows_ignored",  # cudaProfilerStart calls past --capture-range-end's last window
    "nvtx_ranges_untracked",  # NVTX ranges --capture-range nvtx:NAME could not follow
)


def stream_paths(directory: Path) -> list[Path]:
    return sorted(directory.glob(STREAM_GLOB))


def is_launch(api_name: str) -> bool:
    return api_name.startswith(_LAUNCH_PREFIXES)


_API_VERSION_SUFFIX = re.compile(r"(_v\d+)?(_pt(sz|ds))?(_v\d+)?$")


def api_name(cupti_name: str) -> str:
    """The name users know: CUPTI's `cudaLaunchKernel_v7000` and `cuLaunchKernel_ptsz` are
    `cudaLaunchKernel` and `cuLaunchKernel` (the version and per-thread-stream variants of
    one API call)."""
    return _API_VERSION_SUFFIX.sub("", cupti_name) or cupti_name


def has_user_frame(stack: model.Stack | None) -> bool:
    """True when a stack has a frame outside libcuda/libcupti/libcudart (and this library)."""
    if stack is None:
        return False
    return any(
        not any(m in os.path.basename(f.module) for m in CUDA_LIBRARY_MARKERS) for f in stack.frames
    )


class CuptiSource:
    """Reads every stream in a directory; iterate `events()` once, then read `counts`."""

    def __init__(self, directory: Path, symbolizer: Symbolizer | None = None) -> None:
        self.directory = directory
        self.symbolizer = symbolizer or Symbolizer()
        # Every reported counter is present, zero included (SQL reads them by name).
        self.counts: Counter[str] = Counter({key: 0 for key in REPORTED_COUNTS})
        self._devices_seen: set[int] = set()
        self.windows: list[model.CaptureWindow] = []  # in stream order

    def events(self) -> Iterator[model.Event]:
        for stream in read_streams(stream_paths(self.directory), self.counts):
            yield from self._process(stream)

    # -- one process ----------------------------------------------------------------------
    def _process(self, stream: Stream) -> Iterator[model.Event]:
        counts = self.counts
        info = process_events(stream, counts)
        if info is None:
            return
        pid, events = info
        yield from events
        devices = stream.table("DEVICE")
        for dev, name in zip(devices["device"], devices["name"], strict=True):
            if dev not in self._devices_seen:
                self._devices_seen.add(dev)
                yield model.GpuDevice(dev, name)

        strings = self._strings(stream)
        counters = stream.table("COUNTER")
        if counters.rows:
            last = dict(zip(counters["name"], counters["value"], strict=True))
            counts["cupti_delivered_kernel"] += last.get("records_kernel", 0)
            for key in (
                "cupti_dropped_records",
                "transport_dropped_rows",
                "stack_table_full",
                "python_guard_failures",
                "unwind_fp_fallbacks",
                "unwind_cfi_misses",
                "api_alias_records",
                "transport_bytes",
                "windows_ignored",
                "nvtx_ranges_untracked",
            ):
                counts[key] += last.get(key, 0)
            minor = last.get("python_unsupported_minor", 0)
            if minor:  # Python frames wanted, but not this CPython's frame layout
                counts["streams_python_unsupported"] += 1
                counts["python_unsupported_minor"] = max(counts["python_unsupported_minor"], minor)
        else:
            counts["streams_without_counters"] += 1  # killed before its final flush

        windows = stream.table("WINDOW")
        counts["windows"] += windows.rows
        for start, end, reason, end_reason in zip(
            windows["start"], windows["end"], windows["reason"], windows["end_reason"], strict=True
        ):
            self.windows.append(model.CaptureWindow(pid, start, end, reason, end_reason))

        cpu = self._api_rows(stream, strings, pid)
        gpu = _GpuRows()
        self._kernels(stream, strings, gpu)
        self._memcpys(stream, gpu)
        self._memsets(stream, gpu)
        self._syncs(stream, gpu)
        flow_from, flow_to = self._link(stream, cpu, gpu)
        instants = self._markers(stream, strings, pid, cpu)
        counts["gpu_ops"] += gpu.rows
        counts["gpu_ops_with_flow"] += len(flow_to)
        yield model.SliceBatch(pid, cpu.columns(), gpu.columns(), flow_from, flow_to)
        yield from instants

    def _api_rows(self, stream: Stream, strings: dict[int, str], pid: int) -> _CpuRows:
        """The API calls as CPU rows, with their launch stacks, and the launch counts."""
        counts = self.counts
        api = stream.table("API")
        cpu = _CpuRows()
        counts["records_api"] += api.rows
        if not api.rows:
            return cpu
        api_names = stream.table("API_NAME")
        names = dict(zip(api_names["api_id"], api_names["name"], strict=True))
        api_id = np.asarray(api["api_id"], np.int64)
        ids, name_index = np.unique(api_id, return_inverse=True)
        id_names = [api_name(names.get(i, f"cuda_api_{i:#x}")) for i in ids.tolist()]
        stacks = self._stacks(stream, strings)
        stack_ids = np.asarray(api["stack_id"], np.int64)
        known = np.array(sorted(stacks), np.int64)
        stack_index = _find(known, stack_ids)  # -1 is model.NONE: no stack
        found = stack_index >= 0
        # Launch counts per row: a launch API, with a stack, with a frame of the user's.
        launch = np.array([is_launch(n) for n in id_names], bool)[name_index]
        # (one more False for rows without a stack)
        user = np.array([has_user_frame(stacks[i]) for i in known.tolist()] + [False], bool)
        counts["launches"] += int(launch.sum())
        counts["launches_without_stack"] += int((launch & ~found).sum())
        counts["launches_with_user_frame"] += int((launch & user[stack_index]).sum())
        start = np.asarray(api["start"], np.int64)
        cpu.add(
            ts=start,
            dur=np.maximum(np.asarray(api["end"], np.int64) - start, 0),
            track=np.asarray(api["tid"], np.int64),
            name=cpu.names.index_of(id_names)[name_index],
            category=cpu.categories.index_of([model.CAT_CUDA_API])[0],
            args=cpu.arg_sets.index_of([()])[0],
            correlation_id=np.asarray(api["correlation_id"], np.int64),
            stack=stack_index,
        )
        cpu.stacks = [stacks[i] for i in known.tolist()]
        return cpu

    def _link(self, stream: Stream, cpu: _CpuRows, gpu: _GpuRows) -> tuple[np.ndarray, np.ndarray]:
        """Flows: every GPU op to the API call with its correlation id, or to the runtime
        call of the nested driver call with that id (API_ALIAS rows)."""
        counts = self.counts
        api = stream.table("API")
        corr = gpu.column("correlation_id")
        none = np.zeros(0, np.int64)
        if not api.rows or not len(corr):
            counts["gpu_ops_without_api"] += len(corr)
            return none, none
        api_corr = np.asarray(api["correlation_id"], np.int64)
        row = _find(api_corr, corr)
        alias = stream.table("API_ALIAS")
        if alias.rows:
            missing = np.flatnonzero(row < 0)
            runtime = _find(np.asarray(alias["driver_correlation_id"], np.int64), corr[missing])
            owner = np.asarray(alias["runtime_correlation_id"], np.int64)[np.maximum(runtime, 0)]
            via = np.where(runtime >= 0, _find(api_corr, owner), -1)
            row[missing] = via
            counts["gpu_ops_matched_via_alias"] += int((via >= 0).sum())
        linked = np.flatnonzero(row >= 0)
        counts["gpu_ops_without_api"] += len(corr) - len(linked)
        return row[linked], linked

    # -- tables -----------------------------------------------------------------------------
    @staticmethod
    def _strings(stream: Stream) -> dict[int, str]:
        t = stream.table("STRING")
        return dict(zip(t["string_id"], t["text"], strict=True)) if t.rows else {}

    def _kernels(self, stream: Stream, strings: dict[int, str], gpu: _GpuRows) -> None:
        t = stream.table("KERNEL")
        if not t.rows:
            return
        self.counts["records_kernel"] += t.rows
        c = {k: np.asarray(v, np.int64) for k, v in t.columns.items() if k != "name"}
        name_ids, name_index = np.unique(c["name_id"], return_inverse=True)
        names = [demangle(strings.get(i, "?")) for i in name_ids.tolist()]
        graph = c["graph_id"] != 0
        arg_cols = np.stack(
            [
                c["grid_x"],
                c["grid_y"],
                c["grid_z"],
                c["block_x"],
                c["block_y"],
                c["block_z"],
                c["registers"],
                c["static_shared_memory"] + c["dynamic_shared_memory"],
                c["graph_id"],
                np.where(graph, c["graph_node_id"], 0),
            ],
            axis=1,
        )
        rows, arg_index = np.unique(arg_cols, axis=0, return_inverse=True)
        arg_sets = []
        for row in rows.tolist():
            args = tuple(zip(_KERNEL_ARGS, row[:8], strict=True))
            if row[8]:
                args += (("graph_id", row[8]), ("graph_node_id", row[9]))
            arg_sets.append(args)
        gpu.add_ops(c, gpu.names.index_of(names)[name_index], model.CAT_KERNEL)
        gpu.set_args(gpu.arg_sets.index_of(arg_sets)[arg_index.reshape(-1)])

    def _memcpys(self, stream: Stream, gpu: _GpuRows) -> None:
        t = stream.table("MEMCPY")
        if not t.rows:
            return
        self.counts["records_memcpy"] += t.rows
        c = {k: np.asarray(v, np.int64) for k, v in t.columns.items()}
        peer = c["copy_kind"] == _PEER_COPY
        arg_cols = np.stack(
            [
                c["copy_kind"],
                c["bytes"],
                np.where(peer, c["src_device"], 0),
                np.where(peer, c["dst_device"], 0),
            ],
            axis=1,
        )
        rows, arg_index = np.unique(arg_cols, axis=0, return_inverse=True)
        names, arg_sets = [], []
        for kind_id, size, src, dst in rows.tolist():
            kind = _MEMCPY_KINDS.get(kind_id, "unknown")
            args: tuple[tuple[str, model.ArgValue], ...] = (("bytes", size), ("copy_kind", kind))
            if kind_id == _PEER_COPY:
                args += (("src_device", src), ("dst_device", dst))
            names.append(f"Memcpy {kind}")
            arg_sets.append(args)
        arg_index = arg_index.reshape(-1)
        gpu.add_ops(c, gpu.names.index_of(names)[arg_index], model.CAT_MEMCPY)
        gpu.set_args(gpu.arg_sets.index_of(arg_sets)[arg_index])

    def _memsets(self, stream: Stream, gpu: _GpuRows) -> None:
        t = stream.table("MEMSET")
        if not t.rows:
            return
        self.counts["records_memset"] += t.rows
        c = {k: np.asarray(v, np.int64) for k, v in t.columns.items()}
        rows, arg_index = np.unique(
            np.stack([c["bytes"], c["value"]], axis=1), axis=0, return_inverse=True
        )
        arg_sets = [(("bytes", size), ("value", value)) for size, value in rows.tolist()]
        name = gpu.names.index_of(["Memset"])[0]
        gpu.add_ops(c, np.full(t.rows, name, np.int64), model.CAT_MEMSET)
        gpu.set_args(gpu.arg_sets.index_of(arg_sets)[arg_index.reshape(-1)])

    def _syncs(self, stream: Stream, gpu: _GpuRows) -> None:
        t = stream.table("SYNC")
        if not t.rows:
            return
        self.counts["records_sync"] += t.rows
        c = {k: np.asarray(v, np.int64) for k, v in t.columns.items()}
        # The device of a sync: the library's own (from the sync call's context) when it has
        # one, else the device of the context's kernels (CUPTI's SYNCHRONIZATION records name
        # only the context), else the process's first device.
        kernels = stream.table("KERNEL")
        context_device = (
            dict(zip(kernels.columns["context"], kernels.columns["device"], strict=True))
            if kernels.rows
            else {}
        )
        devices = stream.table("DEVICE")
        first = devices["device"][0] if devices.rows else 0
        unknown = np.flatnonzero(c["device"] == _NO_ID)
        c["device"][unknown] = [
            context_device.get(x, first) for x in c["context"][unknown].tolist()
        ]
        # Context-wide syncs have no stream: they go on a "Stream -1"-free track, stream 0.
        c["stream"] = np.where(c["stream"] == _NO_ID, 0, c["stream"])
        kinds, kind_index = np.unique(c["sync_type"], return_inverse=True)
        names = [_SYNC_KINDS.get(k, "Synchronize") for k in kinds.tolist()]
        kind_index = kind_index.reshape(-1)
        gpu.add_ops(c, gpu.names.index_of(names)[kind_index], model.CAT_SYNC)
        arg_sets = [(("sync_type", k),) for k in kinds.tolist()]
        gpu.set_args(gpu.arg_sets.index_of(arg_sets)[kind_index])

    def _stacks(self, stream: Stream, strings: dict[int, str]) -> dict[int, model.Stack]:
        out = stream_stacks(stream, strings, self.symbolizer, counts=self.counts, launch=True)
        self.counts["stacks_unique"] += len(out)
        return out

    def _markers(
        self, stream: Stream, strings: dict[int, str], pid: int, cpu: _CpuRows
    ) -> list[model.Instant]:
        """NVTX: ranges become CPU rows (they nest with the API calls on their thread),
        marks become instants (returned)."""
        t = stream.table("MARKER")
        if not t.rows:
            return []
        self.counts["records_marker"] += t.rows
        open_ranges: dict[int, tuple[int, int, str, str]] = {}
        instants = []
        ranges: list[tuple[int, int, int, str, str]] = []
        c = t.columns
        for i in range(t.rows):
            flags, mid, ts, tid = c["flags"][i], c["marker_id"][i], c["timestamp"][i], c["tid"][i]
            name = strings.get(c["name_id"][i], "")
            domain = strings.get(c["domain_id"][i], "")
            if flags & _MARKER_INSTANT:
                instants.append(
                    model.Instant(pid, tid, ts, name, "nvtx", {"domain": domain} if domain else {})
                )
            elif flags & _MARKER_START:
                open_ranges[mid] = (ts, tid, name, domain)
            elif flags & _MARKER_END and mid in open_ranges:
                start, stid, sname, sdomain = open_ranges.pop(mid)
                ranges.append((start, max(0, ts - start), stid, sname, sdomain))
        if ranges:
            cpu.add(
                ts=np.array([r[0] for r in ranges], np.int64),
                dur=np.array([r[1] for r in ranges], np.int64),
                track=np.array([r[2] for r in ranges], np.int64),
                name=cpu.names.index_of([r[3] for r in ranges]),
                category=cpu.categories.index_of(["nvtx"])[0],
                args=cpu.arg_sets.index_of([(("domain", r[4]),) if r[4] else () for r in ranges]),
                correlation_id=model.NONE,
                stack=model.NONE,
            )
        return instants


def _find(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row of each key in `table` (any order, unique values), -1 where absent."""
    if not len(table):
        return np.full(len(keys), -1, np.int64)
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    position = np.minimum(np.searchsorted(ordered, keys), len(ordered) - 1)
    return np.where(ordered[position] == keys, order[position], -1)


class _Interned:
    """Distinct values in first-seen order; index_of() gives each value's index."""

    def __init__(self) -> None:
        self.values: list = []
        self._index: dict = {}

    def index_of(self, values: Sequence) -> np.ndarray:
        out = np.empty(len(values), np.int64)
        for i, value in enumerate(values):
            index = self._index.get(value)
            if index is None:
                index = self._index[value] = len(self.values)
                self.values.append(value)
            out[i] = index
        return out


class _Rows:
    """Slices gathered as column pieces, then joined into one SliceColumns."""

    _COLUMNS: tuple[str, ...] = ("ts", "dur", "track", "name", "category", "args", "correlation_id")

    def __init__(self) -> None:
        self.names = _Interned()
        self.categories = _Interned()
        self.arg_sets = _Interned()
        self.pieces: dict[str, list[np.ndarray]] = {k: [] for k in self._COLUMNS}
        self.rows = 0

    def add(self, **columns: np.ndarray | int) -> None:
        n = len(columns["ts"])  # type: ignore[arg-type]
        for key, value in columns.items():
            piece = np.asarray(value, np.int64)
            self.pieces[key].append(np.broadcast_to(piece, (n,)) if piece.ndim == 0 else piece)
        self.rows += n

    def column(self, key: str) -> np.ndarray:
        pieces = self.pieces[key]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)

    def _common(self) -> dict:
        return dict(
            ts=self.column("ts"),
            dur=self.column("dur"),
            track=self.column("track"),
            name=self.column("name"),
            names=list(self.names.values),
            category=self.column("category"),
            categories=list(self.categories.values),
            args=self.column("args"),
            arg_sets=[dict(items) for items in self.arg_sets.values],
            correlation_id=self.column("correlation_id"),
        )


class _CpuRows(_Rows):
    """API calls and NVTX ranges (track = thread id), with launch stacks."""

    _COLUMNS = (*_Rows._COLUMNS, "stack")

    def __init__(self) -> None:
        super().__init__()
        self.stacks: list[model.Stack] = []

    def columns(self) -> model.SliceColumns:
        return model.SliceColumns(
            **self._common(), device=None, stack=self.column("stack"), stacks=self.stacks
        )


class _GpuRows(_Rows):
    """Kernels, copies, sets and syncs (track = stream of `device`)."""

    _COLUMNS = (*_Rows._COLUMNS, "device")

    def add_ops(self, c: dict[str, np.ndarray], name: np.ndarray, category: str) -> None:
        """Rows of one GPU record table: its device, stream, times and correlation ids;
        args follow with set_args()."""
        self.add(
            ts=c["start"],
            dur=np.maximum(c["end"] - c["start"], 0),
            track=c["stream"],
            device=c["device"],
            name=name,
            category=self.categories.index_of([category])[0],
            correlation_id=c["correlation_id"],
        )

    def set_args(self, args: np.ndarray) -> None:
        self.pieces["args"].append(args)

    def columns(self) -> model.SliceColumns:
        return model.SliceColumns(**self._common(), device=self.column("device"))
