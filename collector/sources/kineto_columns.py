"""Kineto JSON -> SliceBatches in columns: what `convert` runs (issue 24).

The object path this replaced (kept as the reference the tests hold this to:
tests/kineto_reference.py) made a model object, an args dict and a window slot per event,
and the writer's object path encoded each one: that per-event object work, not the parse,
was most of its time (docs/benchmarks.md, "Big traces").  Here each of the reader's runs
(~200 events) is taken apart while it is in the CPU caches (_Pending): the complete (`X`)
events of the common layout become int64 arrays (times in ns, pids, tids) and name and
category ids, their args' keys and values tuples, and the run's dicts are freed then;
flow events (`s`/`f`) go to the flow columns (_FlowEnds); the rest (metadata, instants,
complete events of another layout) to kineto_events.py's per-event functions, in input order
(kineto_events.ObjectEvents).
Every CHUNK complete events make a chunk of columns (_Columns.add), args split per
*shape* (the event's kind and its tuple of arg keys):
- int args that vary (External id, Record function id, Sequence number...) become int
  columns (model.IntArgColumn), written as varints by batch_writer.py;
- every other arg (texts, floats, bools, lists as JSON text, kernel grid/block, few-valued
  ints) goes into the row's arg set, each distinct set encoded once.
At each chunk the rows held but the last chunk's are linked and written as one
SliceBatch (_flush): flows by correlation id and the input's flow pairs, both ends of a
flow in one batch, so every row meets the rows a chunk before and after it.  Every flow
event that makes no flow is counted by reason.  Memory: two chunks of columns, the
distinct names, at most ARG_SETS_KEPT arg sets past a flush.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Sequence
from itertools import compress, repeat
from operator import eq, itemgetter, not_, or_
from pathlib import Path
from typing import Generic, NamedTuple, TypeGuard, TypeVar

import numpy as np
import orjson

from collector import model
from collector.arrays import group_rows_by_keys, rows_by_keys
from collector.sources import kineto, kineto_events, kineto_ids
from collector.sources.json_value import JsonObject, JsonValue
from collector.sources.kineto import ConvertStats, Head
from collector.sources.kineto_events import (
    API_CATEGORIES,
    API_TO_DEVICE_FLOWS,
    DROPPED_ARGS,
    GPU_CATEGORIES,
)

# Complete events a chunk of columns holds (two chunks are held: the reference's window).
CHUNK = 1 << 16
# Other events (instants, metadata...) and flow events held before a chunk is closed
# whatever its complete events: a trace of instants alone streams like one of slices.
# (Flow events come about one per complete event: four chunks' worth never close one
# early in a profiler's trace.)
OTHERS_HELD = CHUNK
FLOW_ENDS_HELD = 4 * CHUNK
_NONE = model.NONE
_CPU, _API, _GPU = 0, 1, 2
_TIME_LIMIT = kineto_ids.FLOAT_EXACT_US  # below it, us * 1000.0 is exact
_INT32_MIN, _INT32_END = kineto_ids.INT32.start, kineto_ids.INT32.stop
_MAX_US = kineto_ids.MAX_NS // 1000
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NUMBERS = frozenset((int, float))
_STR = frozenset((str,))
_INT = frozenset((int,))
_INT_ONLY = {int}
_FLOW_PHASES = frozenset(("s", "f"))
_FLOW_FIELDS = ("ph", "cat", "id", "pid", "tid", "ts")
# GPU op args carried by the contract's own fields (track, correlation id).
_GPU_OWN_ARGS = frozenset(("device", "stream", "correlation"))
_XYZ = ("grid", "block")
# Distinct arg sets held past a flush before those no held row uses are forgotten.
ARG_SETS_KEPT = 1 << 16
_FEW_ROWS = 16
_FEW_VALUES = 64
# An entry of a head column: the (key, value) args one event's value becomes (none for
# a null, three for a kernel's grid or block).
Entry = tuple[tuple[str, model.ArgValue], ...]
_V = TypeVar("_V")


class _Interned(Generic[_V]):
    """Values -> dense ids, in first-seen order (names, categories, arg sets); `clean`:
    what a value is kept as (kineto_ids.clean_name for names).  A value is its own key
    unless add() is given one (an arg set, a dict, is keyed by its items)."""

    def __init__(self, clean: Callable[[_V], _V] | None = None) -> None:
        self.index: dict[Hashable, int] = {}
        self.values: list[_V] = []
        self._clean = clean

    def add(self, value: _V, key: Hashable = None) -> int:
        key = value if key is None else key
        ident = self.index.get(key)
        if ident is None:
            ident = self.index[key] = len(self.values)
            self.values.append(value)
        return ident

    def ids(self, items: Sequence[_V]) -> np.ndarray:
        """The id of every item (hashable, distinct values equal only if the same)."""
        index = self.index
        # One lookup per item where all are known (after the first runs: names repeat).
        found = list(map(index.get, items))
        if None in found:
            for value in dict.fromkeys(items):
                if value not in index:
                    index[value] = len(self.values)
                    self.values.append(value if self._clean is None else self._clean(value))
            found = list(map(index.__getitem__, items))
        return np.array(found, np.int64)


_CHUNK_COLUMNS = (
    "kind", "ts", "dur", "pid", "tid", "name", "category", "args", "corr", "device", "stream"
)  # fmt: skip


class _Chunk:
    """One chunk's rows as columns (what _Columns.add makes of CHUNK event dicts)."""

    def __init__(self, n: int) -> None:
        self.kind = np.zeros(n, np.int8)
        self.ts = np.zeros(n, np.int64)
        self.dur = np.zeros(n, np.int64)
        self.pid = np.zeros(n, np.int64)
        self.tid = np.zeros(n, np.int64)
        self.name = np.zeros(n, np.int64)
        self.category = np.zeros(n, np.int64)
        self.args = np.zeros(n, np.int64)
        self.corr = np.full(n, _NONE, np.int64)
        self.device = np.zeros(n, np.int64)
        self.stream = np.zeros(n, np.int64)
        # int arg key -> (values, present)
        self.ints: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def int_column(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        column = self.ints.get(key)
        if column is None:
            n = len(self.ts)
            column = self.ints[key] = (np.zeros(n, np.int64), np.zeros(n, bool))
        return column


_GETTERS = tuple(itemgetter(k) for k in ("name", "cat", "ts", "dur", "pid", "tid"))
_GET_ARGS = itemgetter("args")


class _Pending:
    """Complete events taken apart a run at a time, while the run's objects are still in
    the CPU caches (a pass over events parsed a chunk ago costs several times more: they
    have left them, and freeing them then costs more too): per run,
    times, pids and tids as int64 arrays, names and categories as ids, args' keys and
    values as tuples; the dicts of rows of another layout kept for the object path."""

    def __init__(self, names: _Interned[str], categories: _Interned[str]) -> None:
        self.n = 0  # complete events taken, those of another layout included
        self._names, self._categories = names, categories
        self.runs: list[tuple[np.ndarray, ...]] = []  # (ts, dur, pid, tid, name, raw cat)
        self.arg_keys: list[tuple[str, ...]] = []
        self.arg_values: list[tuple[JsonValue, ...]] = []
        # Rows of another layout: (their index here, their dict), for the object path.
        self.others: list[tuple[int, JsonObject]] = []

    def __len__(self) -> int:
        return self.n

    def extend(self, events: list[JsonObject]) -> None:
        if not events:
            return
        try:
            fields: list[list[JsonValue]] = [list(map(get, events)) for get in _GETTERS]
            args = list(map(_GET_ARGS, events))
            keys = list(map(tuple, args))
            values = list(map(tuple, map(dict.values, args)))
            layout = _common_layout(*fields)
        except (KeyError, TypeError):  # fields left out, args no object, a list as a name
            layout = None
        if layout is None:
            self._extend_slowly(events)
            return
        names, cats, ts, dur, pids, tids = layout
        self.runs.append(
            (
                _clean_times_ns(ts),
                _clean_times_ns(dur),
                np.array(pids, np.int64),
                np.array(tids, np.int64),
                self._names.ids(names),
                self._categories.ids(cats),
            )
        )
        self.arg_keys += keys
        self.arg_values += values
        self.n += len(events)

    def _extend_slowly(self, events: list[JsonObject]) -> None:
        """A run not all of the common layout: its rows checked one field at a time as
        kineto_events.py reads them; those of another layout left to kineto_events.ObjectEvents."""
        fields: tuple[list[JsonValue], ...] = tuple([] for _ in _DEFAULTS)
        keys: list[tuple[str, ...]] = []
        values: list[tuple[JsonValue, ...]] = []
        for e in events:
            for column, (key, default) in zip(fields, _DEFAULTS, strict=True):
                column.append(e.get(key, default))
            args = e.get("args")
            if type(args) is not dict:
                args = {}
            keys.append(tuple(args))
            values.append(tuple(args.values()))
        n = len(events)
        raw_names, raw_cats, raw_ts, raw_dur, raw_pids, raw_tids = fields
        _number_text_ids(raw_pids)
        _number_text_ids(raw_tids)
        ok = np.ones(n, bool)
        names, cats = _strs_or_blank(raw_names, ok), _strs_or_blank(raw_cats, ok)
        ts, dur = _numbers_or_zero(raw_ts, ok), _numbers_or_zero(raw_dur, ok)
        pids, tids = _ints_or_zero(raw_pids, ok), _ints_or_zero(raw_tids, ok)
        ts_ns, dur_ns = _times_ns(ts, ok), _times_ns(dur, ok)
        pid, tid = _int32s(pids, ok), _int32s(tids, ok)
        self.others += ((self.n + i, events[i]) for i in np.flatnonzero(~ok).tolist())
        self.n += n
        if not ok.any():
            return
        self.runs.append(
            (
                ts_ns[ok],
                dur_ns[ok],
                pid[ok],
                tid[ok],
                self._names.ids(list(compress(names, ok))),
                self._categories.ids(list(compress(cats, ok))),
            )
        )
        self.arg_keys += compress(keys, ok)
        self.arg_values += compress(values, ok)


class _Layout(NamedTuple):
    """A run's fields, of the layout the columns take whole (_common_layout)."""

    names: Sequence[str]
    cats: Sequence[str]
    ts: Sequence[int | float]
    dur: Sequence[int | float]
    pids: Sequence[int]
    tids: Sequence[int]


def _common_layout(
    names: list[JsonValue],
    cats: list[JsonValue],
    ts: list[JsonValue],
    dur: list[JsonValue],
    pids: list[JsonValue],
    tids: list[JsonValue],
) -> _Layout | None:
    """A run's fields if they are all of the layout the columns take whole (str names
    and categories, finite times of [0, _TIME_LIMIT) us, int32 pids and tids), else
    None: a few C-level passes while the run is in the caches."""
    if not (
        _strs(names)
        and _strs(cats)
        and _numbers(ts)
        and _numbers(dur)
        and _ints(pids)
        and _ints(tids)
    ):
        return None
    in_range = (
        # (A NaN passes min and max, not a finite sum.)
        min(ts) >= 0
        and max(ts) < _TIME_LIMIT
        and math.isfinite(sum(ts))
        and min(dur) >= 0
        and max(dur) < _TIME_LIMIT
        and math.isfinite(sum(dur))
        and min(pids) >= _INT32_MIN
        and max(pids) < _INT32_END
        and min(tids) >= _INT32_MIN
        and max(tids) < _INT32_END
    )
    return _Layout(names, cats, ts, dur, pids, tids) if in_range else None


# Whether every value of a field is of the type the columns take (one C-level pass).
def _strs(values: Sequence[JsonValue]) -> TypeGuard[Sequence[str]]:
    return _STR.issuperset(map(type, values))


def _numbers(values: Sequence[JsonValue]) -> TypeGuard[Sequence[int | float]]:
    return _NUMBERS.issuperset(map(type, values))


def _ints(values: Sequence[JsonValue]) -> TypeGuard[Sequence[int]]:
    return _INT.issuperset(map(type, values))


def _of_types(values: Sequence[JsonValue], types: frozenset[type]) -> np.ndarray:
    return np.fromiter(map(types.__contains__, map(type, values)), bool, len(values))


# A field's values, with a filler where one is of another type (its row's `ok` cleared).
def _strs_or_blank(values: list[JsonValue], ok: np.ndarray) -> Sequence[str]:
    if _strs(values):
        return values
    ok &= _of_types(values, _STR)
    return [v if type(v) is str else "" for v in values]


def _numbers_or_zero(values: list[JsonValue], ok: np.ndarray) -> Sequence[int | float]:
    if _numbers(values):
        return values
    ok &= _of_types(values, _NUMBERS)
    return [v if type(v) is int or type(v) is float else 0 for v in values]


def _ints_or_zero(values: list[JsonValue], ok: np.ndarray) -> Sequence[int]:
    if _ints(values):
        return values
    ok &= _of_types(values, _INT)
    return [v if type(v) is int else 0 for v in values]


def _clean_times_ns(us: Sequence[float | int]) -> np.ndarray:
    """Times of the common layout (ints and floats in [0, _TIME_LIMIT)) as int64 ns: the
    values of _times_ns (below the limit a float product is exact for ints too)."""
    return np.rint(np.array(us, np.float64) * 1000.0).astype(np.int64)


# What kineto_events.py reads for a field left out (None: no time, or the pid/tid None).
_DEFAULTS: tuple[tuple[str, JsonValue], ...] = (
    ("name", ""),
    ("cat", ""),
    ("ts", None),
    ("dur", 0),
    ("pid", None),
    ("tid", None),
)


class _FlowEnds:
    """The input's flow events (`s`, `f`) not linked yet, as columns: each is bound to the
    first complete event at its pid, tid and ts (the reference's rule), at a flush.  A pair is
    (category, id): two int columns, the id's own value where it is an int."""

    def __init__(self, stats: ConvertStats) -> None:
        self.stats = stats
        self.new: tuple[list[JsonValue], ...] = tuple([] for _ in _FLOW_FIELDS)
        self.categories = _Interned[str]()
        self.texts = _Interned[int | str | None]()  # ids that are no int
        self.api_to_device: list[bool] = []  # by category: its id is a correlation id
        self.flow_categories = np.zeros(0, object)
        self.row = np.zeros(0, np.int64)
        self.is_start = np.zeros(0, bool)
        self.category = np.zeros(0, np.int64)
        self.ident = np.zeros(0, np.int64)
        self.correlation = np.zeros(0, np.int64)  # an API -> device pair's id, else NONE
        self.pid = np.zeros(0, np.int64)
        self.tid = np.zeros(0, np.int64)
        self.ts = np.zeros(0, np.int64)
        self.age = np.zeros(0, np.int64)  # flushes it has waited
        self.linked = np.zeros(0, bool)  # a start with a flow written
        self.had_end = np.zeros(0, bool)  # a start whose pair had an end
        # Of the last bind: each end's start (-1: none), the ends of flows made, the ends
        # bound to their start's own row.
        self.start_of = np.zeros(0, np.int64)
        self.made = np.zeros(0, bool)
        self.to_itself = np.zeros(0, bool)

    def extend(self, events: list[JsonObject]) -> None:
        """Flow events of a run, their fields taken while the run is in the caches."""
        for column, key in zip(self.new, _FLOW_FIELDS, strict=True):
            column += map(dict.get, events, repeat(key))

    def held(self) -> int:
        """Flow events held: read since the last flush, and waiting in columns."""
        return len(self.new[0]) + len(self.ts)

    def expire(self, final: bool = False) -> None:
        """No complete event is held to bind to: those read a flush ago go (all of them
        at the end), counted (as _flush's forget does to ends that waited a flush
        unbound)."""
        none = np.zeros(0, np.int64)
        self.bind(none, none, none)
        self.forget(np.zeros(0, bool), final=final)

    def take_new(self) -> None:
        """The flow events read since the last flush, as columns."""
        phases, raw_cats, idents, pids, tids, times = self.new
        self.new = tuple([] for _ in _FLOW_FIELDS)
        n = len(phases)
        if not n:
            return
        is_start = np.array(phases, object) == "s"
        cats = raw_cats if _strs(raw_cats) else [c if type(c) is str else "" for c in raw_cats]
        category = self.categories.ids(cats)
        for name in self.categories.values[len(self.api_to_device) :]:
            self.api_to_device.append(name in API_TO_DEVICE_FLOWS)
        ac2g = self.categories.index.get("ac2g", -1)
        self.stats.ac2g_links_in += int(((category == ac2g) & ~is_start).sum())
        ok = np.ones(n, bool)
        fields = []
        for column in (pids, tids):
            _number_text_ids(column)
            fields.append(_int32s(_ints_or_zero(column, ok), ok))
        ts = _times_ns(_numbers_or_zero(times, ok), ok)
        is_int = np.ones(n, bool)
        try:
            if set(map(type, idents)) != _INT_ONLY:
                raise OverflowError
            ident = np.array(idents, np.int64)
        except OverflowError:  # other ids: text ids interned past the int ones
            keys = [
                kineto_ids.flow_ident(i) if isinstance(i, (int, float, str)) else None
                for i in idents
            ]
            ok &= np.array([k is not None for k in keys], bool)
            is_int = np.array(
                [type(k) is int and _INT64_MIN <= k <= _INT64_MAX for k in keys], bool
            )
            ident = np.array(
                [
                    k if int_key else (1 << 62) + self.texts.add(k)
                    for k, int_key in zip(keys, is_int.tolist(), strict=True)
                ],
                np.int64,
            )
        bad = int((~ok).sum())
        if bad:  # (text pids or tids of flow events are not bound here)
            self.stats.skipped["flow events without a time or id, or with text pids/tids"] += bad
        correlation = np.where(
            np.array(self.api_to_device, bool)[category]
            & is_int
            & (ident >= 0)
            & (ident < 1 << 32),
            ident,
            _NONE,
        )
        for attr, values in (
            ("is_start", is_start),
            ("category", category),
            ("ident", ident),
            ("correlation", correlation),
            ("pid", fields[0]),
            ("tid", fields[1]),
            ("ts", ts),
            ("age", np.zeros(n, np.int64)),
            ("linked", np.zeros(n, bool)),
            ("had_end", np.zeros(n, bool)),
        ):
            setattr(self, attr, np.concatenate((getattr(self, attr), values[ok])))

    def bind(
        self, pid: np.ndarray, tid: np.ndarray, ts: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Flows of the pairs among rows with these keys: (from rows, to rows), and the
        correlation ids that a complete API -> device pair links (not their correlation).
        A pair's second start is dropped, counted (as the reference does)."""
        self.take_new()
        self._drop_repeated_starts()
        n, m = len(ts), len(self.ts)
        none = np.zeros(0, np.int64)
        self.row = np.full(m, _NONE, np.int64)
        self.start_of = np.full(m, -1, np.int64)
        self.made = np.zeros(m, bool)
        self.flow_categories = np.zeros(0, object)
        if not m:
            return none, none, none
        # The first row at each end's key, among the rows at an end's time.
        candidates = np.flatnonzero(np.isin(ts, self.ts))
        k = len(candidates)
        group, _ = group_rows_by_keys(
            np.concatenate((pid[candidates], self.pid)),
            np.concatenate((tid[candidates], self.tid)),
            np.concatenate((ts[candidates], self.ts)),
        )
        first = np.full(int(group.max()) + 1, n, np.int64)
        np.minimum.at(first, group[:k], candidates)
        row = first[group[k:]]
        row[row == n] = _NONE
        self.row = row
        # Pairs: each end's pair, its start (one a pair: _drop_repeated_starts).
        pair, firsts = group_rows_by_keys(self.category, self.ident)
        starts = np.flatnonzero(self.is_start)
        start_of_pair = np.full(len(firsts), -1, np.int64)
        start_of_pair[pair[starts]] = starts
        self.start_of = np.where(self.is_start, -1, start_of_pair[pair])
        ends = np.flatnonzero(~self.is_start)
        has_end = np.zeros(len(firsts), bool)
        has_end[pair[ends]] = True
        self.had_end |= self.is_start & has_end[pair]
        complete = np.unique(pair[ends])
        complete = complete[start_of_pair[complete] >= 0]
        correlation = self.correlation[firsts[complete]]
        start = self.start_of[ends]
        has_start = start >= 0
        src = np.where(has_start, row[np.maximum(start, 0)], _NONE)
        dst = row[ends]
        made = has_start & (src != _NONE) & (dst != _NONE) & (src != dst)
        self.made[ends[made]] = True
        self.to_itself = np.zeros(m, bool)
        self.to_itself[ends[has_start & (src == dst) & (dst != _NONE)]] = True
        names = np.array(self.categories.values, object)
        self.flow_categories = names[self.category[ends][made]]
        return src[made], dst[made], correlation[correlation != _NONE]

    def _drop_repeated_starts(self) -> None:
        """A pair's starts after its first: counted and dropped (as the reference does)."""
        starts = np.flatnonzero(self.is_start)
        if len(starts) < 2:
            return
        pair, _ = group_rows_by_keys(self.category[starts], self.ident[starts])
        _, first = np.unique(pair, return_index=True)
        repeated = np.ones(len(starts), bool)
        repeated[first] = False
        if repeated.any():
            self._count("flow starts repeated under one id", starts[repeated])
            keep = np.ones(len(self.ts), bool)
            keep[starts[repeated]] = False
            self._keep(keep)

    def _count(self, reason: str, records: np.ndarray) -> None:
        """Records (flow events) not made into flows, by their category."""
        names = self.categories.values
        for category, n in zip(*np.unique(self.category[records], return_counts=True), strict=True):
            self.stats.skipped[f"'{names[int(category)]}' {reason}"] += int(n)

    def _keep(self, keep: np.ndarray) -> None:
        for attr in _FLOW_COLUMNS:
            setattr(self, attr, getattr(self, attr)[keep])

    def forget(self, gone: np.ndarray, final: bool) -> None:
        """After a flush (`gone`: the rows written): the flow events that leave are the
        ends of flows written, the ones bound to rows written, the ones that waited a
        flush unbound (as the window forgets them), and at the end all; each one that
        made no flow is counted by reason (the reference's)."""
        if not len(self.ts):
            return
        bound = self.row != _NONE
        went = np.zeros(len(self.ts), bool)
        went[bound] = gone[self.row[bound]]
        leaving = went | (~bound & (self.age >= 1)) | final
        # A start whose flow to an end is written is linked (later ends may follow).
        made_now = self.made & leaving
        self.linked[self.start_of[made_now]] = True
        end_left = leaving & ~self.is_start & ~made_now
        self._count("flow pairs from an event to itself", np.flatnonzero(end_left & self.to_itself))
        end_left &= ~self.to_itself
        with_start = self.start_of >= 0
        self._count("flow pairs with an end at no event", np.flatnonzero(end_left & with_start))
        self._count("flow ends without a start", np.flatnonzero(end_left & ~with_start))
        lone = leaving & self.is_start & ~self.linked & ~self.had_end
        self._count("flow starts without an end", np.flatnonzero(lone))
        self._keep(~leaving)
        self.age += 1


_FLOW_COLUMNS = (
    "is_start", "category", "ident", "correlation", "pid", "tid", "ts", "age", "linked",
    "had_end",
)  # fmt: skip


class _Columns:
    """Every fast-path event of the file, in columns, chunk by chunk."""

    def __init__(self, stats: ConvertStats) -> None:
        self.stats = stats
        self.names = _Interned(kineto_ids.clean_name)
        self.categories = _Interned[str]()
        self.arg_sets = _Interned[dict[str, model.ArgValue]]()
        self.chunks: list[_Chunk] = []
        self.raw_categories = _Interned[str]()  # the input's `cat` strings
        self._kind_of: list[int] = []  # raw category id -> kind
        self._gpu_category: dict[tuple[int, int], int] = {}  # (raw cat, name) -> category
        self.objects: list[tuple[int, JsonObject]] = []  # left to the object path
        self.device_pids: set[int] = set()  # pids of device ops (their labels name nothing)
        self.held_from = 0  # complete events before the last chunk
        self.flow_ends = _FlowEnds(stats)

    def prune_arg_sets(self) -> None:
        """Only the arg sets of the held rows kept, renumbered: a trace whose args take new
        values all along (a copy's bandwidth, a float per kernel) would otherwise hold every
        set it ever had.  (The writer keys what it caches by the set's content.)"""
        held = self.chunks[0]
        used, held.args = np.unique(held.args, return_inverse=True)
        old = self.arg_sets
        key_of = {ident: key for key, ident in old.index.items()}
        self.arg_sets = _Interned()
        for ident in used.tolist():
            self.arg_sets.add(old.values[ident], key_of[ident])

    # -- rows -----------------------------------------------------------------------------
    def add(self, pending: _Pending, first: int) -> None:
        """Complete events (about CHUNK) -> one chunk of columns; those of another layout
        go to `objects` with their place in the input (`first`: the number of complete
        events before these; see convert_columns)."""
        self.held_from = first
        self.objects += ((2 * (first + i) + 1, event) for i, event in pending.others)
        if not pending.runs:
            return
        ts, dur, pid, tid, name, raw = (
            np.concatenate(column) for column in zip(*pending.runs, strict=True)
        )
        c = _Chunk(len(ts))
        c.ts, c.dur, c.pid, c.tid, c.name = ts, dur, pid, tid, name
        for value in self.raw_categories.values[len(self._kind_of) :]:
            self._kind_of.append(
                _GPU if value in GPU_CATEGORIES else _API if value in API_CATEGORIES else _CPU
            )
        kind_of = np.array(self._kind_of, np.int8)
        c.kind = kind_of[raw]
        c.category = self._categories(c, raw)
        self.device_pids.update(np.unique(c.pid[c.kind == _GPU]).tolist())
        c.device = c.pid.copy()  # GPU ops: the device and stream args, else pid and tid
        c.stream = c.tid.copy()
        self._args(c, pending.arg_keys, pending.arg_values, raw)
        self.chunks.append(c)

    def _categories(self, c: _Chunk, raw: np.ndarray) -> np.ndarray:
        """The contract's category of each row: the input's for CPU slices, `cuda_api`
        for API calls, the device op's kind (MTIA's by name) for device ops."""
        raw_values = self.raw_categories.values
        as_output = np.array(
            [self.categories.add(v) for v in raw_values] or [0], np.int64
        )  # CPU slices keep their category
        out = as_output[raw]
        api = c.kind == _API
        if api.any():
            out[api] = self.categories.add(model.CAT_CUDA_API)
        gpu = np.flatnonzero(c.kind == _GPU)
        if len(gpu):
            # One lookup per distinct (raw category, name), in their sorted order.
            raw_gpu, name_gpu = raw[gpu], c.name[gpu]
            pair, firsts = group_rows_by_keys(raw_gpu, name_gpu)
            mapped = []
            for key in zip(raw_gpu[firsts].tolist(), name_gpu[firsts].tolist(), strict=True):
                category = self._gpu_category.get(key)
                if category is None:
                    category = self._gpu_category[key] = self.categories.add(
                        kineto_events.device_category(raw_values[key[0]], self.names.values[key[1]])
                    )
                mapped.append(category)
            out[gpu] = np.array(mapped, np.int64)[pair]
        return out

    # -- args -----------------------------------------------------------------------------
    def _args(
        self,
        c: _Chunk,
        keys: list[tuple[str, ...]],
        values: list[tuple[JsonValue, ...]],
        raw: np.ndarray,
    ) -> None:
        """Split the rows by shape (kind, raw category for API calls, arg keys) and turn
        each shape's args into columns."""
        shapes = _Interned[tuple[str, ...]]()
        shape = shapes.ids(keys)
        # API calls of each category apart: their arg kineto_category names it.
        for rows in rows_by_keys(shape, np.where(c.kind == _API, raw, 0), c.kind):
            first = int(rows[0])
            kind = int(c.kind[first])
            row_list = rows.tolist()
            tuples = [values[first]] if len(row_list) == 1 else itemgetter(*row_list)(values)
            columns: list[tuple[JsonValue, ...]] = (
                list(zip(*tuples, strict=True)) if keys[first] else []
            )
            extra: Entry = ()
            if kind == _API:
                extra = (("kineto_category", self.raw_categories.values[int(raw[first])]),)
            self._shape(c, rows, kind, keys[first], columns, extra)

    def _shape(
        self,
        c: _Chunk,
        rows: np.ndarray,
        kind: int,
        keys: tuple[str, ...],
        columns: list[tuple[JsonValue, ...]],
        extra: Entry,
    ) -> None:
        """The rows of one shape (`columns`: the values of each of its arg `keys`): int
        args into int columns, the others into the row's arg set (one per distinct
        combination of their values)."""
        head: list[tuple[int, str]] = []  # (position, arg name) of args in the arg set
        # Int args of few values (a CUDA call's cbid, a device, a thread id) go into the
        # arg set too: a varying int is two more slots of every packet in the writer.
        few: list[tuple[str, np.ndarray]] = []
        for at, (key, column) in enumerate(zip(keys, columns, strict=True)):
            if key in DROPPED_ARGS:
                continue
            if kind == _GPU and key in _GPU_OWN_ARGS:
                self._gpu_own(c, rows, key, column)
                continue
            if kind == _API and key == "correlation":
                valid = self._correlations(column)
                if valid is not None:
                    c.corr[rows] = valid
                    continue
            name = kineto_events.GPU_ARG_NAMES.get(key, key) if kind == _GPU else key
            # (A column is checked whole only where its first value is an int: ids.)
            if type(column[0]) is int and _ints(column):
                try:
                    ints = np.array(column, np.int64)
                except OverflowError:  # past int64: a text arg, as the encoder writes it
                    pass
                else:
                    if _few_values(column):
                        few.append((name, ints))
                        continue
                    ints_of_key, present = c.int_column(name)
                    ints_of_key[rows] = ints
                    present[rows] = True
                    continue
            head.append((at, name))
        if not head and not few:
            c.args[rows] = self.arg_sets.add(dict(extra), extra)
            return
        # One key per row for all its other head values: their orjson text, which tells
        # apart what the annotations do (1 / 1.0 / true, nested types) and hashes lists.
        head_columns = [columns[at] for at, _ in head]
        n = len(rows)
        if head:
            rows_of = zip(*head_columns, strict=True) if len(head) > 1 else head_columns[0]
            try:
                texts: list[bytes] | list[str] = list(map(orjson.dumps, rows_of))
            except TypeError:  # a value orjson cannot write (an int past 64 bits): by repr
                texts = list(map(repr, zip(*head_columns, strict=True)))
            distinct = dict(zip(texts, range(n), strict=True))  # a row of each
            firsts_of_text = list(distinct.values())
            for ident, text in enumerate(distinct):
                distinct[text] = ident
            text_id = np.fromiter(map(distinct.__getitem__, texts), np.int64, n)
        else:
            text_id = np.zeros(n, np.int64)
            firsts_of_text = [0]
        # A few-valued int joins the arg set only where that keeps the arg sets about as
        # few (a value per text, like a thread id per op), else it varies per row.
        joined = []
        groups = len(firsts_of_text)
        for name, ints in few:
            _, inverse = np.unique(ints, return_inverse=True)
            combined = text_id * (_FEW_VALUES + 1) + inverse
            count = len(np.unique(combined))
            if count <= groups + groups // 4 + 16:
                joined.append((name, ints))
                text_id, groups = combined, count
            else:
                ints_of_key, present = c.int_column(name)
                ints_of_key[rows] = ints
                present[rows] = True
        few = joined
        if few:
            group, firsts = group_rows_by_keys(text_id)
            first_rows = firsts.tolist()
        else:
            group, first_rows = text_id, firsts_of_text
        sets: list[int] = []
        for row in first_rows:
            items: list[tuple[str, model.ArgValue]] = []
            for (_, name), column in zip(head, head_columns, strict=True):
                items += self._entry(name, column[row], kind == _GPU)
            items += ((name, int(ints[row])) for name, ints in few)
            items += extra
            # 1, 1.0 and True are equal dict keys but other annotations: typed keys.
            set_key = tuple((k, type(v), v) for k, v in items)
            sets.append(self.arg_sets.add(dict(items), set_key))
        c.args[rows] = np.array(sets, np.int64)[group]

    def _entry(self, name: str, value: JsonValue, gpu: bool) -> Entry:
        """The args one arg value is written as: none for a null, the value for a
        scalar, the compact JSON text of a list or dict (a kernel's grid and block:
        three ints)."""
        if value is None:
            return ()
        if isinstance(value, (list, dict)):
            return _structured(name, value, gpu)
        return ((name, value),)

    def _gpu_own(
        self, c: _Chunk, rows: np.ndarray, key: str, column: tuple[JsonValue, ...]
    ) -> None:
        """A device op's device, stream or correlation arg, into its column (the pid or
        tid stay where the arg is no valid id, as kineto_events.gpu_op)."""
        if key == "correlation":
            valid = self._correlations(column)
            if valid is None:
                valid = np.array(
                    [
                        x
                        if (x := kineto_ids.id_or_none(v, kineto_ids.CORRELATIONS)) is not None
                        else -1
                        for v in column
                    ],
                    np.int64,
                )
            c.corr[rows] = valid
            return
        valid_range = kineto_ids.INT32 if key == "device" else kineto_ids.STREAMS
        ids = [kineto_ids.id_or_none(v, valid_range) for v in column]
        target = c.device if key == "device" else c.stream
        for row, ident in zip(rows.tolist(), ids, strict=True):
            if ident is not None:
                target[row] = ident
        if key == "stream":
            stream = c.stream[rows]
            c.stream[rows] = np.where((stream == -1) | (stream == 0xFFFFFFFF), 0xFFFFFFFF, stream)

    @staticmethod
    def _correlations(column: tuple[JsonValue, ...]) -> np.ndarray | None:
        """The column as correlation ids where every value is one (an int in uint32)."""
        if set(map(type, column)) != {int}:
            return None
        try:
            ids = np.array(column, np.int64)
        except OverflowError:
            return None
        if len(ids) and (ids.min() < 0 or ids.max() >= 1 << 32):
            return None
        return ids


def _times_ns(values: Sequence[int | float], ok: np.ndarray) -> np.ndarray:
    """Kineto times (us: floats, or ints for epoch-based times) as int64 ns, the values
    kineto_ids.time_ns gives; `ok` cleared where one is no time (negative, too large)."""
    if set(map(type, values)) == _INT:
        try:
            us = np.array(values, np.int64)
        except OverflowError:
            pass
        else:
            ok &= (us >= 0) & (us < _MAX_US)
            return np.where(ok, us, 0) * 1000  # exact, as kineto_ids.time_ns
    as_float = np.array(values, np.float64)
    if bool(np.all(as_float < _TIME_LIMIT)):
        ok &= as_float >= 0  # (and no NaN)
        return np.rint(np.where(ok, as_float, 0.0) * 1000.0).astype(np.int64)  # half to even
    # Large float times (decimals past float precision once in ns): per value.
    ns = [kineto_ids.time_ns(v) for v in values]
    ok &= np.array([t is not None and t >= 0 for t in ns], bool)
    return np.array([t if t is not None and t >= 0 else 0 for t in ns], np.int64)


def _number_text_ids(column: list[JsonValue]) -> None:
    """Text pids or tids that spell a number (kineto_ids.text_id) as that number, in place."""
    if _STR.isdisjoint(map(type, column)):
        return
    for i, value in enumerate(column):
        if type(value) is str and (number := kineto_ids.text_id(value)) is not None:
            column[i] = number


def _int32s(values: Sequence[int], ok: np.ndarray) -> np.ndarray:
    """`values` (ints) as int64, `ok` cleared where one is no int32."""
    try:
        out = np.array(values, np.int64)
    except OverflowError:  # an int past int64: per value
        good = [_INT32_MIN <= v < _INT32_END for v in values]
        ok &= np.array(good, bool)
        out = np.array([v if g else 0 for v, g in zip(values, good, strict=True)], np.int64)
    ok &= (out >= _INT32_MIN) & (out < _INT32_END)
    return out


def _few_values(column: Sequence[int]) -> bool:
    """Whether an int column has at most _FEW_VALUES distinct values, and at most one per
    _FEW_ROWS rows (its first 256 values first: ids are told at once)."""
    most = min(len(column) // _FEW_ROWS, _FEW_VALUES)
    sample = column[:256]
    return (
        most > 0
        and len(set(sample)) <= min(most, len(sample) // _FEW_ROWS)
        and len(set(column)) <= most
    )


def _structured(name: str, value: list[JsonValue] | JsonObject, gpu: bool) -> Entry:
    """The args of a list or dict value: a kernel's grid and block as three ints
    (kineto_events.gpu_args), anything else its compact JSON text."""
    xyz = kineto_events.grid_xyz(value) if gpu and name in _XYZ else None
    if xyz is not None:
        x, y, z = xyz
        return ((f"{name}_x", x), (f"{name}_y", y), (f"{name}_z", z))
    return ((name, kineto_events.json_text(value)),)


def convert_columns(
    path: Path,
    head: Head,
    stats: ConvertStats,
    progress: Callable[[int], None] | None = None,
    chunk: int = CHUNK,
) -> Iterator[model.Event]:
    """The events of `path` for TraceWriter.producer().write(): every chunk, the object
    events before the chunk held back (names, instants, rare slices) and one SliceBatch
    per host process."""
    with kineto.deep_values():
        yield from _convert_columns(path, head, stats, progress, chunk)


def _convert_columns(
    path: Path,
    head: Head,
    stats: ConvertStats,
    progress: Callable[[int], None] | None,
    chunk: int,
) -> Iterator[model.Event]:
    columns = _Columns(stats)
    pending = _Pending(columns.names, columns.raw_categories)
    # The other events, keyed by their place among the complete ones (the object path's
    # synthetic ids, for text pids and tids, are numbered in input order): 2k for one
    # after k complete events, 2k + 1 for the complete event k (_Columns.add).
    others: list[tuple[int, JsonObject]] = []
    other_layout = kineto_events.ObjectEvents(head, stats, columns.device_pids)
    for device, device_name in sorted(head.device_names.items()):
        yield model.GpuDevice(device, device_name)

    def objects_before(limit: float) -> Iterator[model.Event]:
        """The object events (names first: a lane track takes its thread's name when it
        is made) that come before key `limit` in the input, in input order."""
        nonlocal others
        due = [item for item in others if item[0] < limit]
        due += [item for item in columns.objects if item[0] < limit]
        others = [item for item in others if item[0] >= limit]
        columns.objects = [item for item in columns.objects if item[0] >= limit]
        due.sort(key=itemgetter(0))
        return other_layout.events([ev for _, ev in due])

    seen_x = 0  # complete events before `pending`
    events_in = 0
    for run in kineto.event_runs(path, progress, stats):
        events_in += len(run)
        phases = list(map(dict.get, run, repeat("ph")))
        is_x = list(map(eq, phases, repeat("X")))
        if all(is_x):
            pending.extend(run)
        else:
            x_before = np.cumsum(is_x) - is_x + seen_x + len(pending)
            pending.extend(list(compress(run, is_x)))
            try:
                is_flow = list(map(_FLOW_PHASES.__contains__, phases))
            except TypeError:  # a phase that is no string
                is_flow = [p == "s" or p == "f" for p in phases]
            columns.flow_ends.extend(list(compress(run, is_flow)))
            other = list(map(not_, map(or_, is_x, is_flow)))
            others += zip((2 * x_before[other]).tolist(), compress(run, other), strict=True)
        if len(pending) >= chunk:
            columns.add(pending, seen_x)
            seen_x += len(pending)
            pending = _Pending(columns.names, columns.raw_categories)
            if len(columns.chunks) > 1:
                yield from objects_before(2 * columns.held_from)
                yield from other_layout.ahead_of(_flush(columns, stats, final=False))
        elif len(others) >= OTHERS_HELD or columns.flow_ends.held() >= FLOW_ENDS_HELD:
            # Few complete events among many others: what is held goes now (the others
            # all come before the next complete event, their place kept).
            if len(pending):
                columns.add(pending, seen_x)
                seen_x += len(pending)
                pending = _Pending(columns.names, columns.raw_categories)
            yield from objects_before(2 * seen_x + 1)
            if len(columns.chunks) > 1:
                yield from other_layout.ahead_of(_flush(columns, stats, final=False))
            elif not columns.chunks:
                columns.flow_ends.expire()
    stats.events_in += events_in  # (and the items that are no object: event_runs)
    columns.add(pending, seen_x)
    if not stats.events_in:
        raise kineto.KinetoFormatError(
            f"{path}: no 'traceEvents' array; is this a PyTorch profiler trace?"
        )
    yield from objects_before(float("inf"))
    if columns.chunks:
        yield from other_layout.ahead_of(_flush(columns, stats, final=True))
    else:  # no complete event to bind to: every flow event is counted
        columns.flow_ends.expire(final=True)
    yield from other_layout.held()


def _flush(columns: _Columns, stats: ConvertStats, final: bool) -> Iterator[model.SliceBatch]:
    """Batches of the rows held, but for the last chunk's (unless `final`): they wait for
    the API calls or ops of the next chunk, so that every row meets the rows up to a
    chunk before and after it (the reference's window).  A held row linked to a row
    that goes goes with it."""
    chunks = columns.chunks
    if not chunks:
        return

    def joined(attr: str) -> np.ndarray:
        return np.concatenate([getattr(c, attr) for c in chunks])

    kind, ts, dur, pid, tid = (joined(a) for a in ("kind", "ts", "dur", "pid", "tid"))
    name, category, args, corr = (joined(a) for a in ("name", "category", "args", "corr"))
    device, stream = joined("device"), joined("stream")
    n = len(ts)
    ints: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for key in dict.fromkeys(k for c in chunks for k in c.ints):
        parts = [
            c.ints.get(key) or (np.zeros(len(c.ts), np.int64), np.zeros(len(c.ts), bool))
            for c in chunks
        ]
        ints[key] = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))

    # Flows: each device op (not an annotation) to the first API call of its correlation.
    is_gpu = kind == _GPU
    annotation = columns.categories.index.get(model.CAT_GPU_ANNOTATION, -2)
    device_op = is_gpu & (category != annotation)
    api_rows = np.flatnonzero((kind == _API) & (corr != _NONE))
    op_rows = np.flatnonzero(device_op & (corr != _NONE))
    api_corr, first = np.unique(corr[api_rows], return_index=True)
    at = np.searchsorted(api_corr, corr[op_rows])
    found = at < len(api_corr)
    linked = np.zeros(len(op_rows), bool)
    linked[found] = api_corr[at[found]] == corr[op_rows][found]
    # The input's flow pairs; a correlation id that a complete ac2g pair links is not
    # linked by correlation (as in the reference).
    pair_src, pair_dst, paired = columns.flow_ends.bind(pid, tid, ts)
    if len(paired):
        linked &= ~np.isin(corr[op_rows], paired)
    flow_src = np.concatenate((api_rows[first][at[linked]], pair_src))
    flow_dst = np.concatenate((op_rows[linked], pair_dst))
    by_pair = np.concatenate((np.zeros(int(linked.sum()), bool), np.ones(len(pair_src), bool)))
    pair_categories = columns.flow_ends.flow_categories if len(pair_src) else np.zeros(0, object)

    emit = np.ones(n, bool)
    if not final:
        emit[n - len(chunks[-1].ts) :] = False
        while True:  # the two ends of a flow go together
            before = int(emit.sum())
            emit[flow_src[emit[flow_dst]]] = True
            emit[flow_dst[emit[flow_src]]] = True
            if int(emit.sum()) == before:
                break
    columns.flow_ends.forget(emit, final)
    going = emit[flow_src]
    flow_src, flow_dst, by_pair = flow_src[going], flow_dst[going], by_pair[going]
    pair_categories = pair_categories[going[len(going) - len(pair_categories) :]]
    if not final:
        columns.chunks = [_take_ints(chunks, ~emit, n, ints)]

    stats.events_out += int(emit.sum())
    categories = columns.categories.values
    gpu_counts = np.bincount(category[is_gpu & emit], minlength=len(categories))
    gpu_by_category = dict(zip(categories, gpu_counts.tolist(), strict=True))
    stats.kernels += gpu_by_category.get(model.CAT_KERNEL, 0)
    stats.memcpys += gpu_by_category.get(model.CAT_MEMCPY, 0)
    stats.memsets += gpu_by_category.get(model.CAT_MEMSET, 0)
    stats.syncs += gpu_by_category.get(model.CAT_SYNC, 0)
    stats.gpu_annotations += gpu_by_category.get(model.CAT_GPU_ANNOTATION, 0)
    stats.api_calls += int(((kind == _API) & emit).sum())
    stats.cpu_slices += int(((kind == _CPU) & emit).sum())
    # What the batches hold: flows from a CPU row, to a GPU op (one each) or a CPU row.
    host = ~is_gpu
    to_gpu = is_gpu[flow_dst]
    _, first_in = np.unique(flow_dst, return_index=True)
    once = np.zeros(len(flow_dst), bool)
    once[first_in] = True
    usable = host[flow_src] & (~to_gpu | once)
    if not usable.all():
        stats.skipped["flows from a device op, or a second one into one"] += int((~usable).sum())
    flow_src, flow_dst, to_gpu = flow_src[usable], flow_dst[usable], to_gpu[usable]
    pair_categories = pair_categories[usable[len(usable) - len(pair_categories) :]]
    stats.flows += int((~by_pair[usable]).sum())
    stats.flow_pairs.update(pair_categories.tolist())
    stats.fwdbwd_flows += int((pair_categories == "fwdbwd").sum())
    with_api = np.zeros(n, bool)
    with_api[flow_dst[to_gpu]] = True
    stats.gpu_ops_with_api += int((with_api & device_op & emit).sum())
    stats.gpu_ops_without_api += int((~with_api & device_op & emit).sum())

    # One batch: CPU rows of every process (each row's pid), every device op.
    cpu_rows, gpu_rows = np.flatnonzero(host & emit), np.flatnonzero(is_gpu & emit)
    local = np.empty(n, np.int64)  # row -> its index in its part
    local[cpu_rows] = np.arange(len(cpu_rows))
    local[gpu_rows] = np.arange(len(gpu_rows))
    names, arg_sets = columns.names.values, columns.arg_sets.values

    def part(rows: np.ndarray, gpu: bool) -> model.SliceColumns:
        return model.SliceColumns(
            ts=ts[rows],
            dur=dur[rows],
            track=stream[rows] if gpu else tid[rows],
            device=device[rows] if gpu else None,
            name=name[rows],
            names=names,
            category=category[rows],
            categories=categories,
            args=args[rows],
            arg_sets=arg_sets,
            correlation_id=corr[rows],
            int_args=[
                model.IntArgColumn(key, values[rows], present[rows])
                for key, (values, present) in ints.items()
                if present[rows].any()
            ],
            pid=None if gpu else pid[rows],
        )

    yield model.SliceBatch(
        int(pid[cpu_rows[0]]) if len(cpu_rows) else 0,
        part(cpu_rows, False),
        part(gpu_rows, True),
        local[flow_src[to_gpu]],
        local[flow_dst[to_gpu]],
        local[flow_src[~to_gpu]],
        local[flow_dst[~to_gpu]],
    )
    # (After the batch is written: it holds the list of arg sets its ids point into.)
    if not final and len(columns.arg_sets.values) > ARG_SETS_KEPT:
        columns.prune_arg_sets()


def _take_ints(
    chunks: list[_Chunk], rows: np.ndarray, n: int, ints: dict[str, tuple[np.ndarray, np.ndarray]]
) -> _Chunk:
    """The held rows as one chunk (`rows`: a mask over the chunks' rows joined)."""
    out = _Chunk(0)
    for attr in _CHUNK_COLUMNS:
        setattr(out, attr, np.concatenate([getattr(c, attr) for c in chunks])[rows])
    out.ints = {k: (v[rows], p[rows]) for k, (v, p) in ints.items() if p[rows].any()}
    return out
