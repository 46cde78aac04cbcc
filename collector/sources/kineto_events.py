"""What one Kineto event becomes in collector.model terms: categories (device ops, API
calls, CPU slices), args (renamed, ids last, lists and dicts as JSON text), and the
per-event conversion kineto_columns.py hands what it does not take in columns (metadata,
instants, complete events of another layout).

Accelerators: Kineto names the categories after CUDA for ROCm/HIP too (`kernel`,
`cuda_runtime`); MTIA has `mtia_runtime` and `mtia_ccp_events`; XPU `xpu_runtime`; other
PrivateUse1 backends `privateuse1_runtime`/`_driver`; PyTorch 1.8-1.9 wrote `Kernel`,
`Memcpy`, `Memset`, `Runtime`.  Device ops of all of them go on device -> stream tracks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator

import orjson

from collector import model
from collector.sources.json_value import JsonObject, JsonValue
from collector.sources.kineto import ConvertStats, Head
from collector.sources.kineto_ids import (
    CORRELATIONS,
    INT32,
    STREAMS,
    Ids,
    clean_name,
    id_or_none,
    time_ns,
)
from collector.sources.slice_rows import SliceRows

# Flow categories whose id is the correlation id of both ends (API call -> device op):
# where the input has such a pair, the pair is the link, not the correlation id.  (`async`:
# Kineto of 2021, its flows named `launch`.)
API_TO_DEVICE_FLOWS = ("ac2g", "async_gpu", "async")
# Kineto category -> contract category for ops on device stream tracks.
GPU_CATEGORIES = {
    "kernel": model.CAT_KERNEL,
    "gpu_memcpy": model.CAT_MEMCPY,
    "gpu_memset": model.CAT_MEMSET,
    "cuda_sync": model.CAT_SYNC,
    "gpu_user_annotation": model.CAT_GPU_ANNOTATION,
    "Kernel": model.CAT_KERNEL,
    "Memcpy": model.CAT_MEMCPY,
    "Memset": model.CAT_MEMSET,
    "mtia_ccp_events": model.CAT_KERNEL,  # refined by name: see device_category
}
# Host-side accelerator API calls (category `cuda_api` in the trace, whatever the device;
# arg `kineto_category` keeps which).
API_CATEGORIES = (
    "cuda_runtime",
    "cuda_driver",
    "mtia_runtime",
    "xpu_runtime",
    "privateuse1_runtime",
    "privateuse1_driver",
    "Runtime",
    "Driver",
)
# MTIA command-processor events are all one category: their names say what they are
# (`dma_request` copies, `event_wait`/`event_record` order streams, the rest run code).
_MTIA_NAME_CATEGORIES = (
    (re.compile(r"dma|memcpy|copy", re.IGNORECASE), model.CAT_MEMCPY),
    (re.compile(r"memset|fill", re.IGNORECASE), model.CAT_MEMSET),
    (re.compile(r"event|wait|sync|barrier", re.IGNORECASE), model.CAT_SYNC),
)
# Kineto arg name -> our arg name, for GPU ops (the rest keep their Kineto names).
GPU_ARG_NAMES = {
    "registers per thread": "registers_per_thread",
    "shared memory": "shared_memory",
    "bytes": "bytes",
    "memory bandwidth (GB/s)": "bandwidth_gbps",
    "queued": "queued",
    "context": "context",
    "blocks per SM": "blocks_per_sm",
    "warps per SM": "warps_per_sm",
    "est. achieved occupancy %": "est_occupancy_pct",
    "External id": "external_id",
    "cuda_sync_kind": "sync_kind",
    "graph id": "graph_id",
    "graph node id": "graph_node_id",
}
# Kineto bookkeeping that is not written: "Ev Idx" is the event's index in the profiler's
# own event list (unique per event, meaningful nowhere else) and was 13% of a converted
# trace.  Everything else is kept (docs/ARCHITECTURE.md, "Writer").
DROPPED_ARGS = frozenset({"Ev Idx"})
# Args that name one event (ids: a new value nearly every time) go last, after the args
# that repeat: the writer lays an event out in arg order, and an event whose varying
# values sit together at its end is one long deflate match plus a few literals, instead
# of two matches around an id in the middle (docs/benchmarks.md).
_ID_ARGS = ("External id", "Python id", "Python parent id")
_GPU_ID_ARGS = ("external_id",)
_GPU_LABEL = re.compile(r"^\s*((GPU|MTIA|XPU|HPU) \d+|stream \d+)\s*$", re.IGNORECASE)
_NO_STREAM = 0xFFFFFFFF
NONE = model.NONE
# Complete events of another layout held at most before they go to the writer as a batch.
HELD_SLICES = 65536
_SCALARS = (int, float, str)  # arg values kept as they are (bool too: an int)


def device_category(cat: str, name: str) -> str:
    category = GPU_CATEGORIES[cat]
    if cat == "mtia_ccp_events":
        for pattern, named in _MTIA_NAME_CATEGORIES:
            if pattern.search(name):
                return named
    return category


def process_info(pid: int, label: str, links: Head) -> model.ProcessInfo:
    """A host process of the trace; in a distributed job every one is the rank's."""
    return model.ranked_process(pid, label, rank=links.rank, world_size=links.world_size)


# Compact JSON text of list/dict arg values (input shapes, types, strides), cached by the
# value's orjson text (C, cheaper than repr(), itself cheaper than json.dumps(), whose
# Python-level encoder is set up per call): the same few shapes repeat
# on every step.  orjson's text tells apart what JSON does (1 / 1.0 / true, nested types,
# key order), so equal keys give equal text; a value orjson cannot write (an integer past
# 64 bits, a lone surrogate) is keyed by its repr(), a str, never equal to a bytes key.
_JSON_TEXTS: dict[bytes | str, str] = {}
_JSON_TEXTS_MAX = 1 << 16


def json_text(value: JsonValue) -> str:
    try:
        key: bytes | str = orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError
        key = repr(value)
    text = _JSON_TEXTS.get(key)
    if text is None:
        if len(_JSON_TEXTS) >= _JSON_TEXTS_MAX:
            _JSON_TEXTS.clear()
        text = _JSON_TEXTS[key] = json.dumps(value, separators=(",", ":"))
    return text


def grid_xyz(value: JsonValue) -> tuple[int, int, int] | None:
    """A kernel's grid or block as its three ints, where `value` is a list of three finite
    numbers (else None)."""
    if not isinstance(value, list) or len(value) != 3:
        return None
    xyz = []
    for v in value:
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return None
        xyz.append(int(v))
    return xyz[0], xyz[1], xyz[2]


def gpu_args(args: JsonObject) -> dict[str, model.ArgValue]:
    out: dict[str, model.ArgValue] = {}
    for key, value in args.items():
        if key in ("device", "stream", "correlation") or key in DROPPED_ARGS:
            continue  # carried by the contract's own args, or bookkeeping
        name = GPU_ARG_NAMES.get(key, key)
        xyz = grid_xyz(value) if key in ("grid", "block") else None
        if xyz is not None:
            out[f"{name}_x"], out[f"{name}_y"], out[f"{name}_z"] = xyz
        elif isinstance(value, (int, float, str, bool)):
            out[name] = value
        elif value is not None:
            out[name] = json_text(value)
    _ids_last(out, _GPU_ID_ARGS)
    return out


def _ids_last(args: dict[str, model.ArgValue], keys: tuple[str, ...]) -> None:
    """Move the id args `keys` to the end of `args` (dicts keep insertion order)."""
    for key in keys:
        if key in args:
            args[key] = args.pop(key)


def cpu_args(args: JsonValue) -> dict[str, model.ArgValue]:
    if not isinstance(args, dict):
        return {}
    # Scalars as they are (bool is an int), lists and dicts as JSON text, nulls left out;
    # one comprehension (cheaper than a loop's stores).
    out: dict[str, model.ArgValue] = {
        key: value if isinstance(value, _SCALARS) else json_text(value)
        for key, value in args.items()
        if value is not None
    }
    for key in DROPPED_ARGS:
        out.pop(key, None)
    for key in _ID_ARGS:  # _ids_last(out, _ID_ARGS)
        if key in out:
            out[key] = out.pop(key)
    return out


def complete_event(
    ev: JsonObject, ids: Ids, stats: ConvertStats
) -> tuple[int, int, str, JsonObject, int, int] | None:
    """A complete event's (ts, dur, name, args, pid, tid) as the trace takes them (times
    in ns, names as text, args an object, text pids and tids numbered); None, counted by
    reason, where its ts or duration is no time."""
    if "ts" not in ev:
        stats.skipped["complete event without ts"] += 1
        return None
    ts = time_ns(ev["ts"])
    dur = time_ns(ev.get("dur", 0))
    if ts is None or ts < 0:
        stats.skipped[
            "complete events with a ts that is no time (not a number, negative or past 2**62 ns)"
        ] += 1
        return None
    if dur is None or dur < 0:
        stats.skipped[
            "complete events with a duration that is no time (not a number, negative or past "
            "2**62 ns)"
        ] += 1
        return None
    name = ev.get("name", "")
    if type(name) is not str:
        name = str(name)
    name = clean_name(name)
    args = ev.get("args")
    if type(args) is not dict:
        args = {}
    return ts, dur, name, args, ids.get(ev.get("pid")), ids.get(ev.get("tid"))


class Metadata:
    """An `M` event, turned into a process or thread name by metadata_event (once the
    device ops of its pid that come before it are known)."""

    __slots__ = ("device_pids", "head", "label", "name", "pid", "tid")

    def __init__(self, ev: JsonObject, ids: Ids, head: Head, device_pids: set[int]) -> None:
        self.name = ev.get("name")
        args = ev.get("args")
        self.label = args.get("name") if isinstance(args, dict) else None
        # Ids now, in input order (synthetic ids number the names as they come).
        self.pid = ids.get(ev.get("pid", 0))
        self.tid = ids.get(ev.get("tid", 0)) if self.name == "thread_name" else 0
        self.head = head
        self.device_pids = device_pids


def cpu_slice(
    pid: int,
    tid: int,
    ts: int,
    dur: int,
    name: str,
    cat: str,
    args: JsonObject,
    stats: ConvertStats,
) -> tuple[model.CpuSlice, int | None]:
    """A complete event on a CPU thread: a slice of its own category, or an accelerator API
    call (category `cuda_api`) with its correlation id (None where it has no valid one)."""
    kept = cpu_args(args)
    if cat in API_CATEGORIES:
        stats.api_calls += 1
        kept["kineto_category"] = cat
        corr = id_or_none(args.get("correlation"), CORRELATIONS)
        if corr is not None:
            kept["correlation_id"] = corr
            kept.pop("correlation", None)
        return model.CpuSlice(pid, tid, ts, dur, name, model.CAT_CUDA_API, kept), corr
    stats.cpu_slices += 1
    return model.CpuSlice(pid, tid, ts, dur, name, cat, kept), None


def gpu_op(
    ev: JsonObject,
    cat: str,
    ts: int,
    dur: int,
    name: str,
    args: JsonObject,
    stats: ConvertStats,
    ids: Ids,
) -> model.GpuOp:
    # Device: the op's `device` arg, else the pid (Kineto's device pseudo-process: MTIA
    # ops have no device arg).  Stream: the `stream` arg, else the tid.
    device = id_or_none(args.get("device"), INT32)
    if device is None:
        device = ids.get(ev.get("pid", 0))
    stream = id_or_none(args.get("stream"), STREAMS)
    if stream is None:
        stream = ids.get(ev.get("tid", 0))
    if stream in model.NO_STREAM_IDS:
        stream = _NO_STREAM  # one "no stream" track for both spellings
    corr = id_or_none(args.get("correlation"), CORRELATIONS)
    category = device_category(cat, name)
    if category == model.CAT_KERNEL:
        stats.kernels += 1
    elif category == model.CAT_MEMCPY:
        stats.memcpys += 1
    elif category == model.CAT_MEMSET:
        stats.memsets += 1
    elif category == model.CAT_SYNC:
        stats.syncs += 1
    else:
        stats.gpu_annotations += 1
    return model.GpuOp(device, stream, ts, dur, name, category, gpu_args(args), corr)


def metadata_event(item: Metadata, stats: ConvertStats) -> model.Event | None:
    if item.name in ("process_name", "thread_name") and (
        _GPU_LABEL.match(str(item.label or "")) or item.pid in item.device_pids
    ):
        # Kineto names its device pseudo-processes "GPU N" / "MTIA N" and their threads
        # "stream N"; device ops live on the encoder's own device/stream tracks, so these
        # labels name nothing.
        stats.skipped["GPU process/stream labels (GPU tracks are named by xpu-perf)"] += 1
    elif item.name == "process_name" and item.label is not None:
        return process_info(item.pid, str(item.label), item.head)
    elif item.name == "thread_name" and item.label is not None:
        return model.ThreadInfo(item.pid, item.tid, str(item.label).strip())
    # process_labels / *_sort_index only order tracks in Chrome's viewer: nothing to keep.
    return None


class ObjectEvents:
    """What kineto_columns.py leaves, an event at a time in input order: metadata,
    instants, complete events of another layout (text pids or tids, times that are no
    number: their flow ends and correlation ids are not linked; the columns count such
    ends as unbound)."""

    def __init__(self, head: Head, stats: ConvertStats, device_pids: set[int]) -> None:
        self.head = head
        self.stats = stats
        self.device_pids = device_pids
        self.ids = Ids()
        self.named: set[tuple[int, int]] = set()
        self.rows = SliceRows()

    def held(self) -> Iterator[model.SliceBatch]:
        """The complete events read so far, as one batch (none if there are none): they go
        ahead of the next batch of the columns, and once HELD_SLICES of them are held."""
        if self.rows.rows:
            yield self.rows.batch()
            self.rows = SliceRows()

    def ahead_of(self, batches: Iterable[model.SliceBatch]) -> Iterator[model.SliceBatch]:
        """`batches`, the complete events held going first if there is any batch."""
        for batch in batches:
            yield from self.held()
            yield batch

    def events(self, events: list[JsonObject]) -> Iterator[model.Event]:
        head, stats, device_pids, ids, named = (
            self.head, self.stats, self.device_pids, self.ids, self.named
        )  # fmt: skip
        for ev in events:
            ph = ev.get("ph")
            cat = ev.get("cat")
            if type(cat) is not str:
                cat = ""
            if ph == "X":
                parts = complete_event(ev, ids, stats)
                if parts is None:
                    continue
                ts, dur, name, args, pid, tid = parts
                if cat in GPU_CATEGORIES:
                    device_pids.add(pid)
                    op = gpu_op(ev, cat, ts, dur, name, args, stats, ids)
                    op_corr = NONE if op.correlation_id is None else op.correlation_id
                    self.rows.gpu(
                        op.device, op.stream, ts, dur, name, op.category, op.args, op_corr
                    )
                else:
                    if (pid, tid) not in named and (pid in ids.names or tid in ids.names):
                        named.add((pid, tid))
                        if pid in ids.names:
                            yield process_info(pid, ids.names[pid], head)
                        yield model.ThreadInfo(pid, tid, ids.names.get(tid, str(tid)))
                    cpu, corr = cpu_slice(pid, tid, ts, dur, name, cat, args, stats)
                    kept = cpu.args
                    if corr is not None:  # in the batch's correlation id column
                        kept = {k: v for k, v in kept.items() if k != "correlation_id"}
                    self.rows.cpu(
                        pid, tid, ts, dur, name, cpu.category, kept, NONE if corr is None else corr
                    )
                stats.events_out += 1
                if self.rows.rows >= HELD_SLICES:
                    yield from self.held()
            elif ph in ("i", "I", "n"):
                at = time_ns(ev.get("ts"))
                if at is None or at < 0:
                    stats.skipped["instant events with a ts that is no time"] += 1
                    continue
                pid, tid = ids.get(ev.get("pid")), ids.get(ev.get("tid", 0))
                name = clean_name(str(ev.get("name", "")))
                yield model.Instant(pid, tid, at, name, cat, cpu_args(ev.get("args")))
                stats.instants += 1
                stats.events_out += 1
            elif ph == "M":
                # The device ops of the chunks read so far are known (the reference's
                # window decides a label as late).
                stats.metadata_events += 1
                event = metadata_event(Metadata(ev, ids, head, device_pids), stats)
                if event is not None:
                    yield event
            else:
                stats.skipped[f"phase '{str(ph)[:20]}' events are not converted"] += 1
