"""PyTorch profiler (Kineto) Chrome-JSON traces -> collector.model events.

Streaming, two passes over the file (plain or .gz), both with ijson's C backend:
1. a scan that learns the links: for every correlation id, how many GPU ops it caused
   and whether its runtime/driver call is present; where `fwdbwd` flows start and end;
   the GPU names from `deviceProperties`;
2. the conversion proper, which can then give each API slice the flow ids of all of its
   GPU ops (a CUDA graph launch fans out to every kernel of the graph) even though Kineto
   writes GPU ops before or after their API calls in no fixed order.
Memory holds those link tables (a few ints per correlation), never the events.
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import ijson

from collector import model

# Kineto category -> contract category for ops on GPU stream tracks.
GPU_CATEGORIES = {
    "kernel": model.CAT_KERNEL,
    "gpu_memcpy": model.CAT_MEMCPY,
    "gpu_memset": model.CAT_MEMSET,
    "cuda_sync": model.CAT_SYNC,
    "gpu_user_annotation": model.CAT_GPU_ANNOTATION,
}
API_CATEGORIES = ("cuda_runtime", "cuda_driver")
# Kineto arg name -> our arg name, for GPU ops (the rest keep their Kineto names).
_GPU_ARG_NAMES = {
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
_GPU_LABEL = re.compile(r"^\s*(GPU \d+|stream \d+)\s*$", re.IGNORECASE)
_FLOW_NAMESPACE_FWDBWD = 1 << 62  # keeps fwd->bwd flow ids apart from API->GPU ones


class KinetoFormatError(Exception):
    """The input is not a readable Kineto trace; the message is one line for the user."""


@dataclass
class ConvertStats:
    events_in: int = 0
    events_out: int = 0
    kernels: int = 0
    memcpys: int = 0
    memsets: int = 0
    syncs: int = 0
    gpu_annotations: int = 0
    api_calls: int = 0
    cpu_slices: int = 0
    instants: int = 0
    flows: int = 0
    fwdbwd_flows: int = 0
    ac2g_links_in: int = 0
    gpu_ops_with_api: int = 0
    gpu_ops_without_api: int = 0
    metadata_events: int = 0
    # reason -> count: every input event that is not written as an event is listed here.
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass
class _Links:
    gpu_ops_per_correlation: Counter[int] = field(default_factory=Counter)
    api_correlations: set[int] = field(default_factory=set)
    # (pid, tid, ts_ns) -> fwdbwd flow ids starting / ending at that slice start
    fwdbwd_out: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    fwdbwd_in: dict[tuple[int, int, int], list[int]] = field(default_factory=dict)
    device_names: dict[int, str] = field(default_factory=dict)


def _open(path: Path) -> IO[bytes]:
    raw = path.open("rb")
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    return raw


def us_to_ns(value: Any) -> int:
    """Kineto microseconds (float, 3 decimals) -> integer nanoseconds."""
    return round(float(value) * 1000.0)


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class _Ids:
    """Kineto uses strings as pid/tid for its own pseudo-tracks ("Spans", "Traces");
    Perfetto needs integers, so such names get stable synthetic ids (and keep the name)."""

    def __init__(self) -> None:
        self._synthetic: dict[str, int] = {}
        self.names: dict[int, str] = {}

    def get(self, value: Any) -> int:
        as_int = _int_or_none(value)
        if as_int is not None:
            return as_int
        text = str(value)
        ident = self._synthetic.get(text)
        if ident is None:
            ident = self._synthetic[text] = 0x7F000000 + len(self._synthetic)
            self.names[ident] = text
        return ident


def _events(path: Path, progress: Callable[[int], None] | None) -> Iterator[dict[str, Any]]:
    """Stream `traceEvents` items; report compressed-bytes progress as we go."""
    stream = _open(path)
    raw = stream.fileobj if isinstance(stream, gzip.GzipFile) else stream  # type: ignore[attr-defined]
    try:
        last = 0
        for n, event in enumerate(ijson.items(stream, "traceEvents.item", use_float=True)):
            if progress is not None and n % 4096 == 0:
                pos = raw.tell()  # type: ignore[union-attr]
                progress(pos - last)
                last = pos
            if isinstance(event, dict):
                yield event
        if progress is not None:
            progress(raw.tell() - last)  # type: ignore[union-attr]
    except (ijson.JSONError, ijson.IncompleteJSONError) as exc:
        raise KinetoFormatError(f"{path}: not valid JSON ({_short(exc)})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise KinetoFormatError(f"{path}: truncated or corrupt gzip data ({_short(exc)})") from None
    except UnicodeDecodeError:
        raise KinetoFormatError(f"{path}: not a text JSON file") from None
    finally:
        stream.close()


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:160] if text else type(exc).__name__


def _device_names(path: Path) -> dict[int, str]:
    """Read `deviceProperties` from the head of the file (Kineto writes it first)."""
    names: dict[int, str] = {}
    stream = _open(path)
    try:
        current: dict[str, Any] = {}
        for prefix, event, value in ijson.parse(stream, use_float=True):
            if prefix == "traceEvents":
                break  # device properties come before the events; stop scanning
            if prefix == "deviceProperties.item.id":
                current["id"] = value
            elif prefix == "deviceProperties.item.name":
                current["name"] = value
            elif prefix == "deviceProperties.item" and event == "end_map":
                if isinstance(current.get("id"), int) and current.get("name"):
                    names[int(current["id"])] = str(current["name"])
                current = {}
    except (ijson.JSONError, ijson.IncompleteJSONError, EOFError, zlib.error, OSError):
        pass  # the main pass reports what is wrong with the file
    finally:
        stream.close()
    return names


def scan_links(path: Path, progress: Callable[[int], None] | None = None) -> _Links:
    links = _Links(device_names=_device_names(path))
    ids = _Ids()
    saw_events = False
    for ev in _events(path, progress):
        saw_events = True
        cat = ev.get("cat")
        ph = ev.get("ph")
        if ph == "X":
            args = ev.get("args")
            corr = _int_or_none(args.get("correlation")) if isinstance(args, dict) else None
            if corr is None:
                continue
            if cat in GPU_CATEGORIES and cat != "gpu_user_annotation":
                links.gpu_ops_per_correlation[corr] += 1
            elif cat in API_CATEGORIES:
                links.api_correlations.add(corr)
        elif cat == "fwdbwd" and ph in ("s", "f") and "ts" in ev and "id" in ev:
            key = (ids.get(ev.get("pid")), ids.get(ev.get("tid")), us_to_ns(ev["ts"]))
            table = links.fwdbwd_out if ph == "s" else links.fwdbwd_in
            table.setdefault(key, []).append(
                _FLOW_NAMESPACE_FWDBWD | (ids.get(ev["id"]) & 0xFFFFFFFF)
            )
    if not saw_events:
        raise KinetoFormatError(
            f"{path}: no 'traceEvents' array; is this a PyTorch profiler trace?"
        )
    # A flow needs both ends: keep only fwd->bwd links whose start and end are present.
    starts = {i for v in links.fwdbwd_out.values() for i in v}
    ends = {i for v in links.fwdbwd_in.values() for i in v}
    both = starts & ends
    for table in (links.fwdbwd_out, links.fwdbwd_in):
        for key in list(table):
            kept = [i for i in table[key] if i in both]
            if kept:
                table[key] = kept
            else:
                del table[key]
    return links


# Compact JSON text of list/dict arg values (input shapes, types, strides), by repr(): the
# same few shapes repeat on every step, and repr() (C) of a list is several times cheaper
# than json.dumps() (Python-level encoder setup per call).  repr() tells apart what JSON
# does (1 / 1.0 / True, nested types, key order), so equal reprs give equal text.
_JSON_TEXTS: dict[str, str] = {}
_JSON_TEXTS_MAX = 1 << 16


def _json_text(value: Any) -> str:
    key = repr(value)
    text = _JSON_TEXTS.get(key)
    if text is None:
        if len(_JSON_TEXTS) >= _JSON_TEXTS_MAX:
            _JSON_TEXTS.clear()
        text = _JSON_TEXTS[key] = json.dumps(value, separators=(",", ":"))
    return text


def _gpu_args(args: dict[str, Any]) -> dict[str, model.ArgValue]:
    out: dict[str, model.ArgValue] = {}
    for key, value in args.items():
        if key in ("device", "stream", "correlation") or key in DROPPED_ARGS:
            continue  # carried by the contract's own args, or bookkeeping
        name = _GPU_ARG_NAMES.get(key, key)
        if key in ("grid", "block") and isinstance(value, list) and len(value) == 3:
            out[f"{name}_x"], out[f"{name}_y"], out[f"{name}_z"] = (int(v) for v in value)
        elif isinstance(value, (int, float, str, bool)):
            out[name] = value
        elif value is not None:
            out[name] = _json_text(value)
    _ids_last(out, _GPU_ID_ARGS)
    return out


def _ids_last(args: dict[str, model.ArgValue], keys: tuple[str, ...]) -> None:
    """Move the id args `keys` to the end of `args` (dicts keep insertion order)."""
    for key in keys:
        if key in args:
            args[key] = args.pop(key)


def _cpu_args(args: Any) -> dict[str, model.ArgValue]:
    if not isinstance(args, dict):
        return {}
    out: dict[str, model.ArgValue] = {}
    for key, value in args.items():
        if key in DROPPED_ARGS:
            continue
        if isinstance(value, (int, float, str, bool)):
            out[key] = value
        elif value is not None:
            out[key] = _json_text(value)
    _ids_last(out, _ID_ARGS)
    return out


def convert_events(
    path: Path,
    links: _Links,
    stats: ConvertStats,
    progress: Callable[[int], None] | None = None,
) -> Iterator[model.Event]:
    """Second pass: yield model events for every Kineto event that carries data."""
    ids = _Ids()
    seen_in_corr: Counter[int] = Counter()
    named_threads: set[tuple[int, int]] = set()
    for device, name in sorted(links.device_names.items()):
        yield model.GpuDevice(device, name)
    for ev in _events(path, progress):
        stats.events_in += 1
        ph = ev.get("ph")
        cat = ev.get("cat") or ""
        if ph == "X":
            if "ts" not in ev:
                stats.skipped["complete event without ts"] += 1
                continue
            ts = us_to_ns(ev["ts"])
            dur = us_to_ns(ev.get("dur", 0))
            name = str(ev.get("name", ""))
            args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
            if cat in GPU_CATEGORIES:
                yield _gpu_op(ev, cat, ts, dur, name, args, links, seen_in_corr, stats, ids)
            else:
                pid, tid = ids.get(ev.get("pid")), ids.get(ev.get("tid"))
                if (pid, tid) not in named_threads and (pid in ids.names or tid in ids.names):
                    named_threads.add((pid, tid))
                    if pid in ids.names:
                        yield model.ProcessInfo(pid, ids.names[pid])
                    yield model.ThreadInfo(pid, tid, ids.names.get(tid, str(tid)))
                flow_out = tuple(links.fwdbwd_out.get((pid, tid, ts), ()))
                flow_in = tuple(links.fwdbwd_in.get((pid, tid, ts), ()))
                stats.fwdbwd_flows += len(flow_out)
                category = cat
                corr = _int_or_none(args.get("correlation"))
                if cat in API_CATEGORIES:
                    category = model.CAT_CUDA_API
                    stats.api_calls += 1
                    if corr is not None:
                        n = links.gpu_ops_per_correlation.get(corr, 0)
                        flow_out += tuple(model.flow_id(0, corr, k) for k in range(n))
                        stats.flows += n
                else:
                    stats.cpu_slices += 1
                cpu_args = _cpu_args(args)
                if cat in API_CATEGORIES:
                    cpu_args["kineto_category"] = cat
                    if corr is not None:
                        cpu_args["correlation_id"] = corr
                        cpu_args.pop("correlation", None)
                yield model.CpuSlice(
                    pid,
                    tid,
                    ts,
                    dur,
                    name,
                    category,
                    cpu_args,
                    flow_ids=flow_out,
                    terminating_flow_ids=flow_in,
                )
            stats.events_out += 1
        elif ph in ("i", "I", "n"):
            if "ts" not in ev:
                stats.skipped["instant event without ts"] += 1
                continue
            pid, tid = ids.get(ev.get("pid")), ids.get(ev.get("tid", 0))
            yield model.Instant(
                pid,
                tid,
                us_to_ns(ev["ts"]),
                str(ev.get("name", "")),
                cat,
                _cpu_args(ev.get("args")),
            )
            stats.instants += 1
            stats.events_out += 1
        elif ph == "M":
            stats.metadata_events += 1
            yield from _metadata(ev, ids, stats)
        elif ph in ("s", "f", "t"):
            if cat == "ac2g":
                stats.ac2g_links_in += ph == "f"
            # Flow events are links, not events: ac2g links become API->GPU flows via the
            # correlation ids, fwdbwd links via the scan; both are counted in the summary.
        else:
            stats.skipped[f"phase '{ph}' events are not converted"] += 1


def _gpu_op(
    ev: dict[str, Any],
    cat: str,
    ts: int,
    dur: int,
    name: str,
    args: dict[str, Any],
    links: _Links,
    seen_in_corr: Counter[int],
    stats: ConvertStats,
    ids: _Ids,
) -> model.GpuOp:
    device = _int_or_none(args.get("device"))
    if device is None:
        device = ids.get(ev.get("pid", 0))
    stream = _int_or_none(args.get("stream"))
    if stream is None:
        stream = ids.get(ev.get("tid", 0))
    corr = _int_or_none(args.get("correlation"))
    category = GPU_CATEGORIES[cat]
    terminating: tuple[int, ...] = ()
    if category != model.CAT_GPU_ANNOTATION:
        if corr is not None and corr in links.api_correlations:
            index = seen_in_corr[corr]
            seen_in_corr[corr] += 1
            terminating = (model.flow_id(0, corr, index),)
            stats.gpu_ops_with_api += 1
        else:
            stats.gpu_ops_without_api += 1
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
    return model.GpuOp(
        device,
        stream,
        ts,
        dur,
        name,
        category,
        _gpu_args(args),
        correlation_id=corr,
        terminating_flow_ids=terminating,
    )


def _metadata(ev: dict[str, Any], ids: _Ids, stats: ConvertStats) -> Iterator[model.Event]:
    name = ev.get("name")
    args = ev.get("args") if isinstance(ev.get("args"), dict) else {}
    label = args.get("name")
    pid = ids.get(ev.get("pid", 0))
    if name in ("process_name", "thread_name") and _GPU_LABEL.match(str(label or "")):
        # Kineto names its GPU pseudo-processes "GPU N" and their threads "stream N"; GPU
        # ops live on the encoder's own GPU/stream tracks, so these labels name nothing.
        stats.skipped["GPU process/stream labels (GPU tracks are named by xpu-perf)"] += 1
    elif name == "process_name" and label is not None:
        yield model.ProcessInfo(pid, str(label))
    elif name == "thread_name" and label is not None:
        yield model.ThreadInfo(pid, ids.get(ev.get("tid", 0)), str(label).strip())
    # process_labels / *_sort_index only order tracks in Chrome's viewer: nothing to keep.


def input_size(path: Path) -> int:
    """Bytes of the file as stored (compressed size for .gz), for progress bars."""
    return path.stat().st_size


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


__all__ = [
    "ConvertStats",
    "KinetoFormatError",
    "convert_events",
    "input_size",
    "scan_links",
]
