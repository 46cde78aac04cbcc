"""PyTorch profiler (Kineto) Chrome-JSON traces: the file and its head, and what one event
becomes in collector.model terms (times, ids, names, args, categories).

Streaming, one pass over the file (plain or .gz): the device names, rank and host from the
head (`read_head`, which stops at `traceEvents`), then the events a run at a time
(`event_runs`, kineto_json.py's reader).  kineto_columns.py turns the runs into columns
(what `convert` writes) and hands the events it does not take in columns (metadata,
instants, complete events of another layout) to the per-event functions here.

Accelerators: Kineto names the categories after CUDA for ROCm/HIP too (`kernel`,
`cuda_runtime`); MTIA has `mtia_runtime` and `mtia_ccp_events`; XPU `xpu_runtime`; other
PrivateUse1 backends `privateuse1_runtime`/`_driver`; PyTorch 1.8-1.9 wrote `Kernel`,
`Memcpy`, `Memset`, `Runtime`.  Device ops of all of them go on device -> stream tracks.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import re
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import IO, Any

import ijson
import orjson

from collector import model
from collector.sources.json_limits import MAX_DEPTH, GuardedReader, LimitExceeded
from collector.sources.kineto_json import trace_event_runs

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
# Times past 2**62 ns (146 years) or ids past int32 are not a profiler's: such an event is
# skipped (times) or its id kept as a name (pid/tid), instead of overflowing the encoder.
MAX_NS = 1 << 62
FLOAT_EXACT_US = (1 << 53) / 1000  # below it, us * 1000.0 rounds to the exact ns
INT32 = range(-(1 << 31), 1 << 31)
INT32_MIN, INT32_END = -(1 << 31), 1 << 31
CORRELATIONS = range(0, 1 << 32)
STREAMS = range(-(1 << 31), 1 << 32)  # int32 or uint32 (CUDA's no-stream 2**32-1)
_NO_STREAM = 0xFFFFFFFF
_SCALARS = frozenset((int, float, str, bool))  # arg values kept as they are
_DICT_ONLY = {dict}


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
    flows: int = 0  # API -> device op, by correlation id (no flow pair in the input)
    fwdbwd_flows: int = 0
    ac2g_links_in: int = 0
    # flow category -> flows made from the input's flow pairs (ac2g, fwdbwd, ...)
    flow_pairs: Counter[str] = field(default_factory=Counter)
    gpu_ops_with_api: int = 0
    gpu_ops_without_api: int = 0
    metadata_events: int = 0
    # reason -> count: every input event that is not written as an event is listed here.
    skipped: Counter[str] = field(default_factory=Counter)


@dataclass
class Head:
    """What Kineto writes ahead of its events: device names (`deviceProperties`), the
    `distributedInfo` of a torch.distributed job (rank, world_size) and the host name, each
    None where the trace does not say it."""

    device_names: dict[int, str] = field(default_factory=dict)
    rank: int | None = None
    world_size: int | None = None
    host: str | None = None


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


def time_ns(value: Any) -> int | None:
    """A Kineto time or duration in ns, or None where it is no number the trace can hold."""
    if type(value) is float and -FLOAT_EXACT_US < value < FLOAT_EXACT_US:
        return round(value * 1000.0)  # the common case, first (the same value as below)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    ns = value * 1000.0
    if not -MAX_NS < ns < MAX_NS:  # also false for NaN
        return None
    if isinstance(value, int):
        return value * 1000  # exact: epoch-based times (1.7e15 us) are past float precision
    if -FLOAT_EXACT_US < value < FLOAT_EXACT_US:
        return round(ns)
    # A large time with decimals: its shortest text times 1000, not the float product
    # (which is off by up to 64 ns at 1.7e15 us).
    return round(Decimal(repr(value)) * 1000)


def device_category(cat: str, name: str) -> str:
    category = GPU_CATEGORIES[cat]
    if cat == "mtia_ccp_events":
        for pattern, named in _MTIA_NAME_CATEGORIES:
            if pattern.search(name):
                return named
    return category


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def id_or_none(value: Any, valid: range) -> int | None:
    """An integer id (also as text, decimal or 0x hex: ROCm writes `"stream": "0x0"`)
    within `valid`, else None."""
    if isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            return None
    as_int = _int_or_none(value)
    return as_int if as_int is not None and as_int in valid else None


# Kineto of 2021 (PyTorch 1.8-1.9, the TensorBoard plugin's samples) wrote every tid as
# text: a CPU thread's number ("5504") and a GPU stream ("stream 7"), with its flow events'
# tids as numbers ("tid": 5504) or the same text.  They are the numbers they spell.
_TEXT_ID = re.compile(r"(?:stream )?([0-9]{1,10})")


def text_id(value: str) -> int | None:
    """The int32 a text pid or tid spells ("5504", "stream 7"), else None."""
    m = _TEXT_ID.fullmatch(value)
    if m is None:
        return None
    number = int(m[1])
    return number if number < INT32_END else None


# What a name says of one run only, left out so that the same code has one name: an
# object's address (`<built-in method mean of Tensor object at 0x7f...>`), and Kineto's
# line 0 of a python_function (`h.py(0): fn`: it had no line; report would show `h.py:0`).
_OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_NO_LINE = re.compile(r"^(.*?\.py)\(0\): ")


def clean_name(name: str) -> str:
    """`name` without an object address or a line 0 (see above)."""
    if " at 0x" in name:
        name = _OBJECT_ADDRESS.sub(">", name)
    if "(0): " in name:
        name = _NO_LINE.sub(r"\1: ", name)
    return name


class Ids:
    """Kineto uses strings as pid/tid for its own pseudo-tracks ("Spans", "Traces");
    Perfetto needs integers, so such names get stable synthetic ids (and keep the name).
    Text that spells a number (text_id) is that number."""

    def __init__(self) -> None:
        self._synthetic: dict[str, int] = {}
        self.names: dict[int, str] = {}

    def get(self, value: Any) -> int:
        if type(value) is int and -(1 << 31) <= value < 1 << 31:
            return value  # the common case, first
        as_int = _int_or_none(value) if type(value) is not str else text_id(value)
        if as_int is not None and as_int in INT32:
            return as_int
        text = str(value)
        ident = self._synthetic.get(text)
        if ident is None:
            ident = self._synthetic[text] = 0x7F000000 + len(self._synthetic)
            self.names[ident] = text
        return ident


NOT_AN_OBJECT = "'traceEvents' items that are no object (an event is a JSON object)"


def event_runs(
    path: Path, progress: Callable[[int], None] | None = None, stats: ConvertStats | None = None
) -> Iterator[list[dict[str, Any]]]:
    """`traceEvents` items that are objects, a list at a time (kineto_json's runs), with
    the file's faults as KinetoFormatError; the other items counted into `stats` (input
    events, skipped)."""

    def open_file() -> tuple[IO[bytes], IO[bytes]]:
        stream = _open(path)
        raw = stream.fileobj if isinstance(stream, gzip.GzipFile) else stream
        return stream, raw

    try:
        for run in trace_event_runs(open_file, progress):
            if set(map(type, run)) != _DICT_ONLY:
                objects = [event for event in run if type(event) is dict]
                if stats is not None and len(objects) < len(run):
                    stats.events_in += len(run) - len(objects)
                    stats.skipped[NOT_AN_OBJECT] += len(run) - len(objects)
                run = objects
            yield run
    except (ijson.JSONError, ijson.IncompleteJSONError) as exc:
        raise KinetoFormatError(f"{path}: not valid JSON ({_short(exc)})") from None
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise KinetoFormatError(f"{path}: truncated or corrupt gzip data ({_short(exc)})") from None
    except UnicodeDecodeError:
        raise KinetoFormatError(f"{path}: not a text JSON file") from None
    except LimitExceeded as exc:
        raise KinetoFormatError(
            f"{path}: refused: {exc}; convert's limits keep its time and memory bounded "
            "(docs/ARCHITECTURE.md, Kineto input)"
        ) from None


@contextlib.contextmanager
def deep_values() -> Iterator[None]:
    """While converting: values nest up to MAX_DEPTH levels (deeper ones are refused), and
    writing one as text (repr, json.dumps, str) recurses once a level: Python's recursion
    limit is raised to allow it, and restored after."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, 4 * MAX_DEPTH))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def _short(exc: BaseException) -> str:
    """The first line of a parser's message, printable (yajl's come as bytes, with the
    input's own bytes on the lines after it)."""
    message = exc.args[0] if exc.args else ""
    if isinstance(message, bytes):
        message = message.decode("utf-8", "replace")
    lines = str(message).strip().splitlines()
    first = "".join(c if c.isprintable() else "?" for c in lines[0])[:160] if lines else ""
    return first or type(exc).__name__


def check_is_json(path: Path) -> None:
    """KinetoFormatError of one line where `path` is no JSON text: what it is, and what
    convert reads."""
    try:
        with _open(path) as stream:
            start = stream.read(1 << 12)
    except (OSError, EOFError, zlib.error):
        return  # the main pass says what is wrong with the file
    text = start.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text[:1] in (b"{", b"["):
        return
    if not start:
        what = "empty" + (" once gunzipped" if is_gzip(path) else "")
    elif start[:1] == b"\x0a" and not _is_text(start):  # a TracePacket's tag, then bytes
        raise KinetoFormatError(
            f"{path} is already a Perfetto trace (not a PyTorch profiler JSON): give it to "
            "report, query or view as it is"
        )
    elif not _is_text(start):
        what = "binary data"
    else:
        what = "plain text"
    raise KinetoFormatError(
        f"{path}: not valid JSON: it is {what}, not a PyTorch profiler trace; convert reads "
        "Kineto's Chrome-JSON (an object with a 'traceEvents' array, plain or gzipped)"
    )


_CONTROL = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def _is_text(data: bytes) -> bool:
    """UTF-8 without control bytes (a character cut at the end of `data` allowed)."""
    if _CONTROL.search(data):
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(data) - 3
    return True


def read_head(path: Path) -> Head:
    """`deviceProperties`, `distributedInfo` and a host name from the head of the file
    (Kineto writes its metadata before the events; the parse stops at `traceEvents`)."""
    links = Head()
    names = links.device_names
    stream = _open(path)
    try:
        current: dict[str, Any] = {}
        # (Through the limits: ijson's prefixes grow with the depth.)
        for prefix, event, value in ijson.parse(GuardedReader(stream), use_float=True):
            if prefix == "traceEvents":
                break  # the metadata comes before the events; stop scanning
            if prefix == "deviceProperties.item.id":
                current["id"] = value
            elif prefix == "deviceProperties.item.name":
                current["name"] = value
            elif prefix == "deviceProperties.item" and event == "end_map":
                if isinstance(current.get("id"), int) and current.get("name"):
                    names[int(current["id"])] = str(current["name"])
                current = {}
            elif prefix == "distributedInfo.rank" and _is_count(value):
                links.rank = int(value)
            elif prefix == "distributedInfo.world_size" and _is_count(value):
                links.world_size = int(value)
            elif prefix in ("hostname", "host_name") and isinstance(value, str) and value:
                links.host = value
    except (
        ijson.JSONError,
        ijson.IncompleteJSONError,
        EOFError,
        zlib.error,
        OSError,
        LimitExceeded,
        UnicodeDecodeError,
    ):
        pass  # the main pass reports what is wrong with the file
    finally:
        stream.close()
    return links


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


def process_info(pid: int, label: str, links: Head) -> model.ProcessInfo:
    """A host process of the trace; in a distributed job every one is the rank's."""
    return model.ranked_process(pid, label, rank=links.rank, world_size=links.world_size)


def flow_ident(ident: int | float | str) -> int | str:
    """A flow id as written: numbers that are integers as int, anything else as text."""
    if isinstance(ident, str):
        return ident
    as_int = _int_or_none(ident)
    return as_int if as_int is not None else repr(ident)


# Compact JSON text of list/dict arg values (input shapes, types, strides), cached by the
# value's orjson text (C, ~5x cheaper than repr(), itself several times cheaper than
# json.dumps(), whose Python-level encoder is set up per call): the same few shapes repeat
# on every step.  orjson's text tells apart what JSON does (1 / 1.0 / true, nested types,
# key order), so equal keys give equal text; a value orjson cannot write (an integer past
# 64 bits, a lone surrogate) is keyed by its repr(), a str, never equal to a bytes key.
_JSON_TEXTS: dict[bytes | str, str] = {}
_JSON_TEXTS_MAX = 1 << 16


def json_text(value: Any) -> str:
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


def gpu_args(args: dict[str, Any]) -> dict[str, model.ArgValue]:
    out: dict[str, model.ArgValue] = {}
    for key, value in args.items():
        if key in ("device", "stream", "correlation") or key in DROPPED_ARGS:
            continue  # carried by the contract's own args, or bookkeeping
        name = GPU_ARG_NAMES.get(key, key)
        if (
            key in ("grid", "block")
            and isinstance(value, list)
            and len(value) == 3
            and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in value
            )
        ):
            out[f"{name}_x"], out[f"{name}_y"], out[f"{name}_z"] = (int(v) for v in value)
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


def cpu_args(args: Any) -> dict[str, model.ArgValue]:
    if not isinstance(args, dict):
        return {}
    # Scalars as they are (JSON gives these exact types, never subclasses), lists and
    # dicts as JSON text, nulls left out; one comprehension (cheaper than a loop's stores).
    out: dict[str, model.ArgValue] = {
        key: value if type(value) in _SCALARS else json_text(value)
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
    ev: dict[str, Any], ids: Ids, stats: ConvertStats
) -> tuple[int, int, str, dict[str, Any], int, int] | None:
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
    """An `M` event, turned into a process or thread name when it leaves the window."""

    __slots__ = ("device_pids", "head", "label", "name", "pid", "tid")

    def __init__(self, ev: dict[str, Any], ids: Ids, head: Head, device_pids: set[int]) -> None:
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
    args: dict[str, Any],
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
    ev: dict[str, Any],
    cat: str,
    ts: int,
    dur: int,
    name: str,
    args: dict[str, Any],
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


def input_size(path: Path) -> int:
    """Bytes of the file as stored (compressed size for .gz), for progress bars."""
    return path.stat().st_size


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


__all__ = [
    "ConvertStats",
    "Head",
    "KinetoFormatError",
    "input_size",
    "read_head",
]
