"""The object path `convert` once ran, kept as the reference its columnar conversion
(collector/sources/kineto_columns.py) is held to: one model event per Kineto event, its
flows linked in a window of events (tests/kineto_reference_flows.py).  Tests compare what
trace_processor reads back from both (tests/convert_compare.py), their counts, and the
bytes they write (tests/test_trace_bytes.py's "convert-reference" cases).

It shares the per-event conversion (times, ids, names, args, categories) with the product
(collector/sources/kineto_events.py, kineto_ids.py); its own are the event-at-a-time loop
and the window.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from collector import model
from collector.sources.kineto import (
    ConvertStats,
    Head,
    KinetoFormatError,
    deep_values,
    event_runs,
)
from collector.sources.kineto_events import (
    API_CATEGORIES,
    GPU_CATEGORIES,
    Metadata,
    complete_event,
    cpu_args,
    cpu_slice,
    gpu_op,
    metadata_event,
    process_info,
)
from collector.sources.kineto_ids import (
    FLOAT_EXACT_US,
    INT32_END,
    INT32_MIN,
    Ids,
    clean_name,
    flow_ident,
    time_ns,
)

from .kineto_reference_flows import API_CALL, DEVICE_OP, WINDOW, EndKey, FlowLinker, Slot

# Categories that are no plain CPU slice (device ops, API calls).
_DEVICE_OR_API = frozenset(GPU_CATEGORIES) | frozenset(API_CATEGORIES)


def _event_key(ev: dict[str, Any], ids: Ids) -> EndKey | None:
    ts = time_ns(ev.get("ts"))
    if ts is None:
        return None
    return (ids.get(ev.get("pid")), ids.get(ev.get("tid")), ts)


def _events(
    path: Path, progress: Callable[[int], None] | None, stats: ConvertStats
) -> Iterator[dict[str, Any]]:
    """Stream `traceEvents` items (kineto_json.py); report stored-bytes progress."""
    for run in event_runs(path, progress, stats):
        yield from run


def convert_events(
    path: Path,
    head: Head,
    stats: ConvertStats,
    progress: Callable[[int], None] | None = None,
    window: int = WINDOW,
) -> Iterator[model.Event]:
    """One pass: yield model events for every Kineto event that carries data, each with its
    flows once it leaves the linker's window (kineto_reference_flows.py)."""
    with deep_values():
        yield from _convert_events(path, head, stats, progress, window)


def _convert_events(
    path: Path,
    head: Head,
    stats: ConvertStats,
    progress: Callable[[int], None] | None,
    window: int,
) -> Iterator[model.Event]:
    ids = Ids()
    linker = FlowLinker(window)
    named_threads: set[tuple[int, int]] = set()
    device_pids: set[int] = set()  # pids that hold device ops (their labels name nothing)
    for device, device_name in sorted(head.device_names.items()):
        yield model.GpuDevice(device, device_name)

    def emit(slot: Slot, key: EndKey | None = None) -> model.Event | None:
        done = linker.push(slot, key)
        return None if done is None else _finish(done, stats)

    names = ids.names  # synthetic pids/tids (text in the input) -> their text
    push = linker.push
    slice_type = model.CpuSlice
    for ev in _events(path, progress, stats):
        stats.events_in += 1
        ph = ev.get("ph")
        cat = ev.get("cat")
        if type(cat) is not str:
            cat = ""
        if ph == "X":
            # The common event in line: a CPU slice (no device op, no API call) with float
            # times and int32 ids that stand for no name; the general path below gives it
            # the same slice.
            ts = ev.get("ts")
            dur = ev.get("dur")
            pid = ev.get("pid")
            tid = ev.get("tid")
            name = ev.get("name")
            if (
                cat not in _DEVICE_OR_API
                and type(ts) is float
                and type(dur) is float
                and 0.0 <= ts < FLOAT_EXACT_US
                and 0.0 <= dur < FLOAT_EXACT_US
                and type(pid) is int
                and type(tid) is int
                and INT32_MIN <= pid < INT32_END
                and INT32_MIN <= tid < INT32_END
                and type(name) is str
                and (not names or (pid not in names and tid not in names))
            ):
                ts = round(ts * 1000.0)
                stats.cpu_slices += 1
                slot = Slot(
                    slice_type(
                        pid,
                        tid,
                        ts,
                        round(dur * 1000.0),
                        clean_name(name),
                        cat,
                        cpu_args(ev.get("args")),
                    )
                )
                done = push(slot, (pid, tid, ts))
                if done is not None:
                    item = done.item
                    if type(item) is slice_type and done.out is None and done.into is None:
                        yield item  # what _finish returns for it
                    elif (event := _finish(done, stats)) is not None:
                        yield event
                stats.events_out += 1
                continue
            parts = complete_event(ev, ids, stats)
            if parts is None:
                continue
            ts, dur, name, args, pid, tid = parts
            if cat in GPU_CATEGORIES:
                device_pids.add(pid)
                op = gpu_op(ev, cat, ts, dur, name, args, stats, ids)
                # An annotation is no op an API call caused.
                annotation = op.category == model.CAT_GPU_ANNOTATION
                slot = Slot(op) if annotation else Slot(op, DEVICE_OP, op.correlation_id)
            else:
                if names and (pid, tid) not in named_threads and (pid in names or tid in names):
                    named_threads.add((pid, tid))
                    process = process_info(pid, ids.names[pid], head) if pid in ids.names else None
                    if process is not None and (event := emit(Slot(process))) is not None:
                        yield event
                    if (
                        event := emit(
                            Slot(model.ThreadInfo(pid, tid, ids.names.get(tid, str(tid))))
                        )
                    ) is not None:
                        yield event
                event, corr = cpu_slice(pid, tid, ts, dur, name, cat, args, stats)
                slot = Slot(event, API_CALL, corr) if corr is not None else Slot(event)
            if (event := emit(slot, (pid, tid, ts))) is not None:
                yield event
            stats.events_out += 1
        elif ph in ("i", "I", "n"):
            if "ts" not in ev:
                stats.skipped["instant event without ts"] += 1
                continue
            ts = time_ns(ev["ts"])
            if ts is None or ts < 0:
                stats.skipped["instant events with a ts that is no time"] += 1
                continue
            pid, tid = ids.get(ev.get("pid")), ids.get(ev.get("tid", 0))
            if (
                event := emit(
                    Slot(
                        model.Instant(
                            pid,
                            tid,
                            ts,
                            clean_name(str(ev.get("name", ""))),
                            cat,
                            cpu_args(ev.get("args")),
                        )
                    )
                )
            ) is not None:
                yield event
            stats.instants += 1
            stats.events_out += 1
        elif ph == "M":
            stats.metadata_events += 1
            # Decided when it leaves the window: by then the device ops of its pid that
            # come up to a window later are known (Kineto writes the labels at the end).
            if (event := emit(Slot(Metadata(ev, ids, head, device_pids)))) is not None:
                yield event
        elif ph in ("s", "f"):
            if cat == "ac2g":
                stats.ac2g_links_in += ph == "f"
            # Flow events are links, not events: each pair becomes a flow, what cannot is
            # in `skipped` by reason.
            key = _event_key(ev, ids)
            ident = ev.get("id")
            if key is not None and isinstance(ident, (int, float, str)):
                linker.flow(ph, cat, flow_ident(ident), key)
            else:
                stats.skipped[f"'{cat}' flow events without a time or id"] += 1
        else:
            stats.skipped[f"phase '{str(ph)[:20]}' events are not converted"] += 1
    if not stats.events_in:
        raise KinetoFormatError(
            f"{path}: no 'traceEvents' array; is this a PyTorch profiler trace?"
        )
    for slot in linker.drain():
        if (event := _finish(slot, stats)) is not None:
            yield event
    stats.flow_pairs.update(linker.flows)
    stats.fwdbwd_flows = linker.flows.get("fwdbwd", 0)
    stats.flows = linker.correlation_flows
    # The flows' reasons first, as the summary has always listed them.
    skipped = Counter(linker.skipped)
    skipped.update(stats.skipped)
    stats.skipped = skipped


def _finish(slot: Slot, stats: ConvertStats) -> model.Event | None:
    """The event of a slot that left the window, with its flows."""
    item = slot.item
    if slot.role == DEVICE_OP:
        if slot.into:
            stats.gpu_ops_with_api += 1
        else:
            stats.gpu_ops_without_api += 1
    if slot.out is not None or slot.into is not None:
        return replace(
            item, flow_ids=tuple(slot.out or ()), terminating_flow_ids=tuple(slot.into or ())
        )
    if type(item) is Metadata:
        return metadata_event(item, stats)
    return item
