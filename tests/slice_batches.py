"""Slices given as objects (model.CpuSlice / GpuOp), as the tests build their synthetic
traces, turned into the SliceBatches the writer takes (it takes slices only in batches).

    producer.write_all(batched(events))

Every event but a slice goes through as it comes; the slices are gathered and go as one
batch (see as_batches) ahead of the next SliceBatch of `events` and at the end, or with
in_batches() as batches of a given size.  A SliceBatch's flows join its own rows: a flow
with one end in a batch is left out, as trace_processor leaves out a flow of one end."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from collector import model
from collector.sources.slice_rows import SliceRows

_NONE = model.NONE


def batched(events: Iterable[model.Event]) -> Iterator[model.Event]:
    """`events` with their slices gathered into SliceBatches (see the module doc)."""
    held: list[model.CpuSlice | model.GpuOp] = []
    for event in events:
        if isinstance(event, (model.CpuSlice, model.GpuOp)):
            held.append(event)
            continue
        if isinstance(event, model.SliceBatch) and held:
            yield from as_batches(held)
            held = []
        yield event
    if held:
        yield from as_batches(held)


def as_batches(slices: Sequence[model.CpuSlice | model.GpuOp]) -> list[model.SliceBatch]:
    """`slices` as one SliceBatch; as one per process where CPU slices of several carry
    launch stacks (the writer writes those for a batch of one process): each GPU op then
    goes with the process of the CPU slice that starts a flow it ends (else the first)."""
    cpu = [ev for ev in slices if isinstance(ev, model.CpuSlice)]
    if len({ev.pid for ev in cpu}) <= 1 or all(ev.launch_stack is None for ev in cpu):
        return [as_batch(slices)]
    starts = {fid: ev for ev in cpu for fid in ev.flow_ids}
    by_pid: dict[int, list[model.CpuSlice | model.GpuOp]] = {}
    for ev in slices:
        if isinstance(ev, model.CpuSlice):
            pid = ev.pid
        else:
            source = next((starts[f] for f in ev.terminating_flow_ids if f in starts), cpu[0])
            pid = source.pid
        by_pid.setdefault(pid, []).append(ev)
    return [as_batch(part) for part in by_pid.values()]


def as_batch(slices: Sequence[model.CpuSlice | model.GpuOp]) -> model.SliceBatch:
    """`slices` as one SliceBatch: the CPU slices' correlation_id args in its correlation
    id column, their launch stacks in its stack column, their flows as row pairs."""
    rows = SliceRows()
    cpu_row: dict[int, int] = {}  # id(slice) -> its CPU row
    gpu_row: dict[int, int] = {}
    for ev in slices:
        if isinstance(ev, model.CpuSlice):
            args = dict(ev.args)
            corr = args.pop("correlation_id", None)
            if type(corr) is not int or corr < 0:  # not an id: an arg like the others
                if corr is not None:
                    args["correlation_id"] = corr
                corr = _NONE
            cpu_row[id(ev)] = rows.cpu(
                ev.pid, ev.tid, ev.ts, ev.dur, ev.name, ev.category, args, corr, ev.launch_stack
            )
        else:
            if ev.flow_ids:
                raise ValueError(f"a GPU op cannot start a flow in a SliceBatch: {ev!r}")
            corr = _NONE if ev.correlation_id is None else ev.correlation_id
            gpu_row[id(ev)] = rows.gpu(
                ev.device, ev.stream, ev.ts, ev.dur, ev.name, ev.category, ev.args, corr
            )
    starts: dict[int, list[int]] = {}
    for ev in slices:
        if isinstance(ev, model.CpuSlice):
            for fid in ev.flow_ids:
                starts.setdefault(fid, []).append(cpu_row[id(ev)])
    flow_from: list[int] = []
    flow_to: list[int] = []
    cpu_from: list[int] = []
    cpu_to: list[int] = []
    for ev in slices:
        for fid in ev.terminating_flow_ids:
            for src in starts.get(fid, ()):
                if isinstance(ev, model.GpuOp):
                    flow_from.append(src)
                    flow_to.append(gpu_row[id(ev)])
                else:
                    cpu_from.append(src)
                    cpu_to.append(cpu_row[id(ev)])
    return rows.batch(flow_from, flow_to, cpu_from, cpu_to)


def in_batches(events: Iterable[model.Event], size: int) -> Iterator[model.Event]:
    """`events` with their slices, in their order, as batches of about `size` slices each
    (more where a flow is open: a batch is cut only where every flow begun in it has
    ended); the other events go through as they come."""
    part: list[model.CpuSlice | model.GpuOp] = []
    open_flows: set[int] = set()
    for ev in events:
        if not isinstance(ev, (model.CpuSlice, model.GpuOp)):
            yield ev
            continue
        part.append(ev)
        open_flows.update(ev.flow_ids)
        open_flows.difference_update(ev.terminating_flow_ids)
        if len(part) >= size and not open_flows:
            yield from as_batches(part)
            part = []
    if part:
        yield from as_batches(part)
