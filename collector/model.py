"""The event model: what every source produces and the one Perfetto encoder consumes.

Sources (Kineto JSON, CUPTI streams, eBPF samplers) translate their records into these
plain, immutable values; nothing here knows about protobuf.  Timestamps are integer
nanoseconds in one clock domain per trace (CLOCK_MONOTONIC for `record`, the input's
own clock for `convert`) and the writer states that domain in a ClockSnapshot.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, TypeAlias

from collector import frames

if TYPE_CHECKING:  # numpy is imported only by the paths that build columns
    import numpy as np
    import numpy.typing as npt

ArgValue = int | float | str | bool
Args = Mapping[str, ArgValue]

# Slice categories that the SQL-facing contract promises (docs/ARCHITECTURE.md).
CAT_KERNEL = "kernel"
CAT_MEMCPY = "memcpy"
CAT_MEMSET = "memset"
CAT_SYNC = "sync"
CAT_GPU_ANNOTATION = "gpu_user_annotation"
CAT_CUDA_API = "cuda_api"
# A blocking call of a thread over the wait threshold (a `waiting in <call>` slice whose arg
# `call` names the libc call; its stack at entry is a WaitStack at the slice's start).
CAT_WAIT = "wait"
GPU_OP_CATEGORIES = (CAT_KERNEL, CAT_MEMCPY, CAT_MEMSET, CAT_SYNC)
# Stream ids of GPU ops on no stream (a context or event sync): CUDA's (uint32)-1, which
# Kineto writes as 4294967295 or -1.  Their track is named "no stream".
NO_STREAM_IDS = frozenset({0xFFFFFFFF, -1})


def flow_id(pid: int, correlation_id: int, index: int = 0) -> int:
    """Trace-unique id of the flow from an API call to the GPU op it caused.

    `pid << 32 | correlation_id` for the first op; a launch that causes several ops
    (a CUDA graph) numbers the others with `index` in bits 56.. so ids never collide
    with another process's first op (pids are < 2**22 on Linux).
    """
    return (index << 56) | ((pid & 0xFFFFFF) << 32) | (correlation_id & 0xFFFFFFFF)


@dataclass(frozen=True, slots=True)
class Frame:
    """One call-stack frame.  `function` is already demangled; `module` is a path or
    a pseudo-module such as "[python]" or "[kernel]"; `rel_pc` is the offset inside it."""

    function: str
    module: str = ""
    rel_pc: int = 0
    build_id: str = ""


def is_python_frame(frame: Frame) -> bool:
    """A frame of Python code: its module is a .py file, or the pseudo-file of code without
    one (`<string>` for `python -c`, `<stdin>`, `<frozen importlib._bootstrap>`)."""
    return frames.is_python_module(frame.module)


@dataclass(frozen=True, slots=True)
class Stack:
    """A call stack, outermost caller first (the order flamegraphs print)."""

    frames: tuple[Frame, ...]


class StackKind(Enum):
    """Why a stack was taken; the two kinds are kept apart in SQL."""

    CPU_SAMPLE = "cpu_sample"  # timer sample (perf_sample table)
    LAUNCH = "launch"  # call site of a CUDA API call (attached to its cuda_api slice)


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    """A process.  `args`: (key, value) pairs in order, e.g. the launcher's rank, local rank
    and world size; written as the descriptor's process labels `key=value` (trace_processor
    keeps them as the process's args `chrome.process_label[i]`, the view xpu_process parses
    them back)."""

    pid: int
    name: str
    cmdline: tuple[str, ...] = ()
    args: tuple[tuple[str, int | str], ...] = ()


RANK_ARGS = ("rank", "local_rank", "world_size")


def ranked_process(
    pid: int,
    name: str,
    cmdline: tuple[str, ...] = (),
    rank: int | None = None,
    local_rank: int | None = None,
    world_size: int | None = None,
) -> ProcessInfo:
    """A process named `rank N (name)` when a launcher gave it a rank (unknown values are
    None or negative and left out), so the ranks of a distributed job read apart in the UI."""
    values = (rank, local_rank, world_size)
    args = tuple((k, v) for k, v in zip(RANK_ARGS, values, strict=True) if v is not None and v >= 0)
    if rank is not None and rank >= 0:
        name = f"rank {rank} ({name})"
    return ProcessInfo(pid, name, cmdline, args)


@dataclass(frozen=True, slots=True)
class ThreadInfo:
    pid: int
    tid: int
    name: str


@dataclass(frozen=True, slots=True)
class GpuDevice:
    device: int
    name: str


@dataclass(frozen=True, slots=True)
class CpuSlice:
    """A slice on a CPU thread: a PyTorch op, a python function or a CUDA API call.

    `flow_ids` start (or continue) flows; `terminating_flow_ids` end them.  A CUDA API
    call carries the flow ids of the GPU ops it caused and, when known, its launch stack.
    """

    pid: int
    tid: int
    ts: int
    dur: int
    name: str
    category: str = ""
    args: Args = field(default_factory=dict)
    flow_ids: tuple[int, ...] = ()
    terminating_flow_ids: tuple[int, ...] = ()
    launch_stack: Stack | None = None


@dataclass(frozen=True, slots=True)
class GpuOp:
    """Work on a GPU stream: kernel, memcpy, memset, sync or a GPU user annotation.

    Lands on the `Stream N` track under `GPU D (<name>)`; ops that overlap on one stream
    go to sibling lanes of the same name, never dropped.
    """

    device: int
    stream: int
    ts: int
    dur: int
    name: str
    category: str
    args: Args = field(default_factory=dict)
    correlation_id: int | None = None
    flow_ids: tuple[int, ...] = ()
    terminating_flow_ids: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CpuSample:
    """A timer sample of one thread's stack (user and kernel frames, root first)."""

    pid: int
    tid: int
    ts: int
    stack: Stack
    cpu: int = 0


@dataclass(frozen=True, slots=True)
class WaitStack:
    """The stack at the entry of a blocking call: the thread's `wait` slice that starts at
    `ts` (root first; the leaf is the libc call).  Kept apart from CPU samples and launch
    stacks (exporters/perfetto/launch_stacks.py writes it; SQL reads it in `xpu_wait`)."""

    pid: int
    tid: int
    ts: int
    stack: Stack


@dataclass(frozen=True, slots=True)
class Instant:
    """A zero-length marker on a thread (e.g. an NVTX mark)."""

    pid: int
    tid: int
    ts: int
    name: str
    category: str = ""
    args: Args = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class GpuCounterSeries:
    """Samples of one counter of one GPU (SM active %, DRAM read throughput, device memory
    in use, ...): `values[i]` holds from `ts[i]` until `ts[i + 1]` (the last one until the
    end of the trace), which is how trace_processor reads a counter track.  Written as a
    counter track named `name` under the `GPU D (<name>)` track of `device`; `unit` is
    the unit's name as the UI shows it (%, MiB/s, MHz, W, bytes)."""

    device: int
    name: str
    unit: str
    ts: Column
    values: FloatColumn


@dataclass(frozen=True, slots=True)
class CaptureWindow:
    """A span of one process in which `record` captured (--capture-range, --delay): what
    opened it (`reason`: cudaProfilerApi, delay) and what closed it (`end_reason`:
    cudaProfilerStop, cuProfilerStop, duration, exit).  Not an Event: the writer puts it on
    the tool's own track."""

    pid: int
    start: int
    end: int
    reason: str
    end_reason: str


# A column: one value per row (a list, an array.array or a numpy array).
Column: TypeAlias = "Sequence[int] | npt.NDArray[np.integer]"
FloatColumn: TypeAlias = "Sequence[float] | npt.NDArray[np.floating]"
NONE = -1  # "no value" in an index or id column


@dataclass(frozen=True, slots=True)
class IntArgColumn:
    """An int arg whose value varies per row (ids: Kineto's External id, Record function
    id, Sequence number): `values[i]` (int64) is arg `key` of row i where `present[i]`."""

    key: str
    values: Column
    present: Sequence[bool]


@dataclass(frozen=True, slots=True)
class SliceColumns:
    """Many slices in columns, row i being one slice: how a columnar source (the CUPTI
    streams) hands the writer a process's slices, which it encodes without an object
    per slice.  `device` is None for CPU slices (track = thread `track` of the batch's
    pid), else GPU ops (track = stream `track` of GPU `device`).  Names, categories, args
    and stacks are indices into the lists beside them; `correlation_id` is NONE or the
    row's `correlation_id` arg; `stack` (CPU slices) NONE or the launch stack;
    `int_args` the row's args beside its arg set that are ints which vary per row."""

    ts: Column
    dur: Column
    track: Column
    device: Column | None
    name: Column
    names: Sequence[str]
    category: Column
    categories: Sequence[str]
    args: Column
    arg_sets: Sequence[Args]
    correlation_id: Column
    stack: Column | None = None
    stacks: Sequence[Stack] = ()
    int_args: Sequence[IntArgColumn] = ()
    # CPU slices of several processes (Kineto: API calls on a device's pseudo-process):
    # each row's pid, where the batch's pid is not all of theirs.
    pid: Column | None = None

    @property
    def rows(self) -> int:
        return len(self.ts)


@dataclass(frozen=True, slots=True)
class SliceBatch:
    """One process's CPU slices (CUDA API calls, NVTX ranges) and GPU ops in columns, and
    the flows between them: flow k goes from CPU row `flow_from[k]` to GPU row
    `flow_to[k]`; flow len(flow_from) + j from CPU row `cpu_flow_from[j]` to CPU row
    `cpu_flow_to[j]` (Kineto's forward -> backward ops, flow pairs between API calls)."""

    pid: int
    cpu: SliceColumns
    gpu: SliceColumns
    flow_from: Column
    flow_to: Column
    cpu_flow_from: Column = ()
    cpu_flow_to: Column = ()

    def slices(self) -> Iterator[CpuSlice | GpuOp]:
        """The same slices as objects (what the writer's object path and tests take);
        flow k is `flow_id(pid, k)`."""
        starts: dict[int, list[int]] = {}
        ends: dict[int, int] = {}
        for k, (src, dst) in enumerate(zip(self.flow_from, self.flow_to, strict=True)):
            fid = flow_id(self.pid, k)
            starts.setdefault(int(src), []).append(fid)
            ends[int(dst)] = fid
        cpu_ends: dict[int, list[int]] = {}
        pairs = zip(self.cpu_flow_from, self.cpu_flow_to, strict=True)
        for k, (src, dst) in enumerate(pairs, len(self.flow_from)):
            fid = flow_id(self.pid, k)
            starts.setdefault(int(src), []).append(fid)
            cpu_ends.setdefault(int(dst), []).append(fid)
        c = self.cpu
        for i in range(c.rows):
            args = dict(c.arg_sets[c.args[i]])
            args.update(_int_args(c, i))
            if c.correlation_id[i] != NONE:
                args["correlation_id"] = int(c.correlation_id[i])
            stack = c.stack[i] if c.stack is not None else NONE
            yield CpuSlice(
                self.pid if c.pid is None else int(c.pid[i]),
                int(c.track[i]),
                int(c.ts[i]),
                int(c.dur[i]),
                c.names[c.name[i]],
                c.categories[c.category[i]],
                args,
                flow_ids=tuple(starts.get(i, ())),
                terminating_flow_ids=tuple(cpu_ends.get(i, ())),
                launch_stack=c.stacks[stack] if stack != NONE else None,
            )
        g = self.gpu
        assert g.device is not None
        for i in range(g.rows):
            corr = g.correlation_id[i]
            end = ends.get(i)
            yield GpuOp(
                int(g.device[i]),
                int(g.track[i]),
                int(g.ts[i]),
                int(g.dur[i]),
                g.names[g.name[i]],
                g.categories[g.category[i]],
                {**g.arg_sets[g.args[i]], **_int_args(g, i)},
                int(corr) if corr != NONE else None,
                terminating_flow_ids=(end,) if end is not None else (),
            )


def _int_args(cols: SliceColumns, row: int) -> dict[str, ArgValue]:
    return {c.key: int(c.values[row]) for c in cols.int_args if c.present[row]}


Event = (
    ProcessInfo
    | ThreadInfo
    | GpuDevice
    | CpuSlice
    | GpuOp
    | CpuSample
    | WaitStack
    | Instant
    | SliceBatch
    | GpuCounterSeries
)
