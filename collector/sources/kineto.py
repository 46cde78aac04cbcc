"""PyTorch profiler (Kineto) Chrome-JSON traces as an input: the file (plain or .gz) and
its faults, its head, its events a run at a time, and the counts a conversion keeps.

Streaming, one pass over the file: the device names, rank and host from the head
(`read_head`, which stops at `traceEvents`), then the events (`event_runs`, kineto_json.py's
reader), which kineto_columns.py turns into what `convert` writes (values by kineto_ids.py,
single events by kineto_events.py).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import re
import sys
import zlib
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeGuard

import ijson

from collector.files import starts_framed
from collector.sources.json_limits import MAX_DEPTH, GuardedReader, LimitExceeded
from collector.sources.json_value import JsonObject, JsonValue
from collector.sources.kineto_json import trace_event_runs

_DICT_ONLY = {dict}


class KinetoFormatError(Exception):
    """The input is not a readable Kineto trace; the message is one line for the user."""


@dataclass
class ConvertStats:
    """What a conversion read, wrote and left out (the summary and the trace's metadata)."""

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


def _open_file(path: Path) -> tuple[io.BufferedIOBase, io.BufferedReader]:
    """The file's bytes (gunzipped where it is gzip) and the file under them."""
    raw = path.open("rb")
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=raw), raw
    return raw, raw


def _open(path: Path) -> io.BufferedIOBase:
    return _open_file(path)[0]


def _objects_only(items: list[JsonValue]) -> TypeGuard[list[JsonObject]]:
    return set(map(type, items)) == _DICT_ONLY


NOT_AN_OBJECT = "'traceEvents' items that are no object (an event is a JSON object)"


def event_runs(
    path: Path, progress: Callable[[int], None] | None = None, stats: ConvertStats | None = None
) -> Iterator[list[JsonObject]]:
    """`traceEvents` items that are objects, a list at a time (kineto_json's runs), with
    the file's faults as KinetoFormatError; the other items counted into `stats` (input
    events, skipped)."""

    try:
        for items in trace_event_runs(lambda: _open_file(path), progress):
            if _objects_only(items):
                yield items
                continue
            objects = [item for item in items if type(item) is dict]
            if stats is not None and len(objects) < len(items):
                stats.events_in += len(items) - len(objects)
                stats.skipped[NOT_AN_OBJECT] += len(items) - len(objects)
            yield objects
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
    framed = not is_gzip(path) and starts_framed(path)
    if text[:1] in (b"{", b"[") and not framed:
        return
    if not start:
        what = "empty" + (" once gunzipped" if is_gzip(path) else "")
    elif framed or (start[:1] == b"\x0a" and not _is_text(start)):  # TracePackets
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
        current: dict[str, object] = {}
        # (Through the limits: ijson's prefixes grow with the depth.)
        for prefix, event, value in ijson.parse(GuardedReader(stream), use_float=True):
            if prefix == "traceEvents":
                break  # the metadata comes before the events; stop scanning
            if prefix == "deviceProperties.item.id":
                current["id"] = value
            elif prefix == "deviceProperties.item.name":
                current["name"] = value
            elif prefix == "deviceProperties.item" and event == "end_map":
                ident, name = current.get("id"), current.get("name")
                if isinstance(ident, int) and name:
                    names[int(ident)] = str(name)
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


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**31


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
    "check_is_json",
    "deep_values",
    "event_runs",
    "input_size",
    "read_head",
]
