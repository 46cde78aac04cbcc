"""GPU ops of a CUPTI stream: the KERNEL, MEMCPY, MEMSET and SYNC tables as GPU rows on their
device's stream tracks, with their names (demangled kernels, copy directions, sync kinds) and
arg sets interned per process."""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector import model
from collector.sources.cupti_rows import GpuRows
from collector.sources.cupti_stream import Stream
from collector.symbolize import demangle

MEMCPY_KINDS = {
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
# CUpti_ActivityMemoryKind of a copy's host side: pageable copies go through a staging
# buffer and block the host, which is what users need to tell apart (Kineto writes the same
# in the op name, "Memcpy HtoD (Pageable -> Device)").
HOST_MEMORY_KINDS = {1: "pageable", 2: "pinned"}
_HOST_SOURCE = (1, 3, 9)  # HtoD, HtoA, HtoH: the source is host memory
_HOST_DESTINATION = (2, 4)  # DtoH, AtoH
SYNC_KINDS = {
    1: "cudaEventSynchronize",
    2: "cudaStreamWaitEvent",
    3: "cudaStreamSynchronize",
    4: "cudaDeviceSynchronize",
}
NO_ID = 0xFFFFFFFF  # the library's NO_ID: a sync op's stream or device not known
PEER_COPY = 10
KERNEL_ARGS = (
    "grid_x",
    "grid_y",
    "grid_z",
    "block_x",
    "block_y",
    "block_z",
    "registers_per_thread",
    "shared_memory",
)


def gpu_op_rows(stream: Stream, strings: dict[int, str], counts: Counter[str]) -> GpuRows:
    """Every GPU op of the stream: kernels, then copies, sets and syncs."""
    gpu = GpuRows()
    kernel_rows(stream, strings, gpu, counts)
    memcpy_rows(stream, gpu, counts)
    memset_rows(stream, gpu, counts)
    sync_rows(stream, gpu, counts)
    return gpu


def kernel_rows(
    stream: Stream, strings: dict[int, str], gpu: GpuRows, counts: Counter[str]
) -> None:
    t = stream.table("KERNEL")
    if not t.rows:
        return
    counts["records_kernel"] += t.rows
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
        args = tuple(zip(KERNEL_ARGS, row[:8], strict=True))
        if row[8]:
            args += (("graph_id", row[8]), ("graph_node_id", row[9]))
        arg_sets.append(args)
    gpu.add_ops(c, gpu.names.index_of(names)[name_index], model.CAT_KERNEL)
    gpu.set_args(gpu.arg_sets.index_of(arg_sets)[arg_index.reshape(-1)])


def memcpy_rows(stream: Stream, gpu: GpuRows, counts: Counter[str]) -> None:
    t = stream.table("MEMCPY")
    if not t.rows:
        return
    counts["records_memcpy"] += t.rows
    c = {k: np.asarray(v, np.int64) for k, v in t.columns.items()}
    peer = c["copy_kind"] == PEER_COPY
    host = np.where(
        np.isin(c["copy_kind"], _HOST_SOURCE),
        c["src_kind"],
        np.where(np.isin(c["copy_kind"], _HOST_DESTINATION), c["dst_kind"], 0),
    )
    arg_cols = np.stack(
        [
            c["copy_kind"],
            c["bytes"],
            np.where(peer, c["src_device"], 0),
            np.where(peer, c["dst_device"], 0),
            host,
        ],
        axis=1,
    )
    rows, arg_index = np.unique(arg_cols, axis=0, return_inverse=True)
    names, arg_sets = [], []
    for kind_id, size, src, dst, host_kind in rows.tolist():
        kind = MEMCPY_KINDS.get(kind_id, "unknown")
        args: tuple[tuple[str, model.ArgValue], ...] = (("bytes", size), ("copy_kind", kind))
        if kind_id == PEER_COPY:
            args += (("src_device", src), ("dst_device", dst))
        if host_kind in HOST_MEMORY_KINDS:
            args += (("host_memory", HOST_MEMORY_KINDS[host_kind]),)
        names.append(f"Memcpy {kind}")
        arg_sets.append(args)
    arg_index = arg_index.reshape(-1)
    gpu.add_ops(c, gpu.names.index_of(names)[arg_index], model.CAT_MEMCPY)
    gpu.set_args(gpu.arg_sets.index_of(arg_sets)[arg_index])


def memset_rows(stream: Stream, gpu: GpuRows, counts: Counter[str]) -> None:
    t = stream.table("MEMSET")
    if not t.rows:
        return
    counts["records_memset"] += t.rows
    c = {k: np.asarray(v, np.int64) for k, v in t.columns.items()}
    rows, arg_index = np.unique(
        np.stack([c["bytes"], c["value"]], axis=1), axis=0, return_inverse=True
    )
    arg_sets = [(("bytes", size), ("value", value)) for size, value in rows.tolist()]
    name = gpu.names.index_of(["Memset"])[0]
    gpu.add_ops(c, np.full(t.rows, name, np.int64), model.CAT_MEMSET)
    gpu.set_args(gpu.arg_sets.index_of(arg_sets)[arg_index.reshape(-1)])


def sync_rows(stream: Stream, gpu: GpuRows, counts: Counter[str]) -> None:
    t = stream.table("SYNC")
    if not t.rows:
        return
    counts["records_sync"] += t.rows
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
    unknown = np.flatnonzero(c["device"] == NO_ID)
    c["device"][unknown] = [context_device.get(x, first) for x in c["context"][unknown].tolist()]
    # Context-wide syncs have no stream: they go on a "Stream -1"-free track, stream 0.
    c["stream"] = np.where(c["stream"] == NO_ID, 0, c["stream"])
    kinds, kind_index = np.unique(c["sync_type"], return_inverse=True)
    names = [SYNC_KINDS.get(k, "Synchronize") for k in kinds.tolist()]
    kind_index = kind_index.reshape(-1)
    gpu.add_ops(c, gpu.names.index_of(names)[kind_index], model.CAT_SYNC)
    arg_sets = [(("sync_type", k),) for k in kinds.tolist()]
    gpu.set_args(gpu.arg_sets.index_of(arg_sets)[kind_index])
