"""Slices gathered a row at a time into one SliceBatch: how the sources whose slices come
one by one (the wait slices of the CPU streams, the eBPF probes' API calls, Kineto's
events of another layout) hand them to the writer, which takes slices only as batches.

Names, categories, arg sets and stacks are interned per batch.  An arg set is keyed by
its values' types too: 1, 1.0 and True are equal as dict keys but encode differently."""

from __future__ import annotations

from collections.abc import Sequence

from collector import model

_NONE = model.NONE


def _index(table: dict, key: object) -> int:
    found = table.get(key)
    if found is None:
        found = table[key] = len(table)
    return found


class _Columns:
    """The rows of one kind (CPU slices or GPU ops) as lists."""

    def __init__(self) -> None:
        self.ts: list[int] = []
        self.dur: list[int] = []
        self.track: list[int] = []
        self.group: list[int] = []  # CPU rows: the pid; GPU rows: the device
        self.name: list[int] = []
        self.category: list[int] = []
        self.args: list[int] = []
        self.correlation_id: list[int] = []
        self.stack: list[int] = []
        self._names: dict[str, int] = {}
        self._categories: dict[str, int] = {}
        self._arg_sets: dict[tuple[tuple[str, type, model.ArgValue], ...], int] = {}
        self._arg_values: list[dict[str, model.ArgValue]] = []
        self._stacks: dict[int, int] = {}  # id(stack) -> index (the list keeps it alive)
        self.stacks: list[model.Stack] = []

    def add(
        self,
        group: int,
        track: int,
        ts: int,
        dur: int,
        name: str,
        category: str,
        args: model.Args,
        correlation_id: int,
        stack: model.Stack | None,
    ) -> int:
        row = len(self.ts)
        self.ts.append(ts)
        self.dur.append(dur)
        self.track.append(track)
        self.group.append(group)
        self.name.append(_index(self._names, name))
        self.category.append(_index(self._categories, category))
        key = tuple((k, type(v), v) for k, v in args.items())
        index = self._arg_sets.get(key)
        if index is None:
            index = self._arg_sets[key] = len(self._arg_values)
            self._arg_values.append(dict(args))
        self.args.append(index)
        self.correlation_id.append(correlation_id)
        if stack is None:
            self.stack.append(_NONE)
        else:
            found = self._stacks.get(id(stack))
            if found is None:
                found = self._stacks[id(stack)] = len(self.stacks)
                self.stacks.append(stack)
            self.stack.append(found)
        return row

    def columns(self, gpu: bool) -> model.SliceColumns:
        several = len(set(self.group)) > 1
        return model.SliceColumns(
            ts=self.ts,
            dur=self.dur,
            track=self.track,
            device=self.group if gpu else None,
            name=self.name,
            names=list(self._names),
            category=self.category,
            categories=list(self._categories),
            args=self.args,
            arg_sets=self._arg_values,
            correlation_id=self.correlation_id,
            stack=self.stack if self.stacks else None,
            stacks=self.stacks,
            pid=self.group if not gpu and several else None,
        )


class SliceRows:
    """CPU slices (on thread `tid` of process `pid`) and GPU ops (on `stream` of GPU
    `device`), one row at a time, then batch() for the writer."""

    def __init__(self) -> None:
        self._cpu = _Columns()
        self._gpu = _Columns()

    @property
    def rows(self) -> int:
        return len(self._cpu.ts) + len(self._gpu.ts)

    def cpu(
        self,
        pid: int,
        tid: int,
        ts: int,
        dur: int,
        name: str,
        category: str,
        args: model.Args,
        correlation_id: int = _NONE,
        stack: model.Stack | None = None,
    ) -> int:
        """A CPU slice; its CPU row number (flows name rows).  `stack`: the launch stack
        of an API call (the writer adds its `debug.launch_stack` arg and sample)."""
        return self._cpu.add(pid, tid, ts, dur, name, category, args, correlation_id, stack)

    def gpu(
        self,
        device: int,
        stream: int,
        ts: int,
        dur: int,
        name: str,
        category: str,
        args: model.Args,
        correlation_id: int = _NONE,
    ) -> int:
        """A GPU op; its GPU row number."""
        return self._gpu.add(device, stream, ts, dur, name, category, args, correlation_id, None)

    def batch(
        self,
        flow_from: Sequence[int] = (),
        flow_to: Sequence[int] = (),
        cpu_flow_from: Sequence[int] = (),
        cpu_flow_to: Sequence[int] = (),
    ) -> model.SliceBatch:
        """The rows as one SliceBatch (flows as in SliceBatch: CPU row -> GPU row, CPU row
        -> CPU row).  The batch's pid is its first CPU row's; CPU rows of several processes
        carry their own (launch stacks are written only for a batch of one process)."""
        cpu = self._cpu
        pid = cpu.group[0] if cpu.group else 0
        return model.SliceBatch(
            pid,
            cpu.columns(gpu=False),
            self._gpu.columns(gpu=True),
            flow_from,
            flow_to,
            cpu_flow_from,
            cpu_flow_to,
        )
