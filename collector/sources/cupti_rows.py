"""Slices of one process gathered as column pieces, then joined into the SliceColumns of a
SliceBatch: the CPU rows (API calls, NVTX ranges) and the GPU rows (kernels, copies, sets,
syncs), each with names, categories and arg sets interned per process.  The CUPTI source
builds rows a table at a time with numpy, never one Python object per slice."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Generic, TypedDict, TypeVar

import numpy as np

from collector import model


def find_rows(table: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Row of each key in `table` (any order, unique values), -1 where absent."""
    if not len(table):
        return np.full(len(keys), -1, np.int64)
    order = np.argsort(table, kind="stable")
    ordered = table[order]
    position = np.minimum(np.searchsorted(ordered, keys), len(ordered) - 1)
    return np.where(ordered[position] == keys, order[position], -1)


_H = TypeVar("_H", bound=Hashable)
# An arg set as the rows hold it: its (key, value) items, hashable.
ArgItems = tuple[tuple[str, model.ArgValue], ...]


class Interned(Generic[_H]):
    """Distinct values in first-seen order; index_of() gives each value's index."""

    def __init__(self) -> None:
        self.values: list[_H] = []
        self._index: dict[_H, int] = {}

    def index_of(self, values: Sequence[_H]) -> np.ndarray:
        out = np.empty(len(values), np.int64)
        for i, value in enumerate(values):
            index = self._index.get(value)
            if index is None:
                index = self._index[value] = len(self.values)
                self.values.append(value)
            out[i] = index
        return out


class CommonColumns(TypedDict):
    """The SliceColumns fields both kinds of rows have."""

    ts: np.ndarray
    dur: np.ndarray
    track: np.ndarray
    name: np.ndarray
    names: list[str]
    category: np.ndarray
    categories: list[str]
    args: np.ndarray
    arg_sets: list[dict[str, model.ArgValue]]
    correlation_id: np.ndarray


class Rows:
    """Slices gathered as column pieces, then joined into one SliceColumns."""

    COLUMNS: tuple[str, ...] = ("ts", "dur", "track", "name", "category", "args", "correlation_id")

    def __init__(self) -> None:
        self.names = Interned[str]()
        self.categories = Interned[str]()
        self.arg_sets = Interned[ArgItems]()
        self.pieces: dict[str, list[np.ndarray]] = {k: [] for k in self.COLUMNS}
        self.rows = 0

    def add(self, ts: np.ndarray, **columns: np.ndarray | int) -> None:
        """Rows: `ts` and the other columns, each an array of as many values or one value
        for every row."""
        n = len(ts)
        for key, value in {"ts": ts, **columns}.items():
            piece = np.asarray(value, np.int64)
            self.pieces[key].append(np.broadcast_to(piece, (n,)) if piece.ndim == 0 else piece)
        self.rows += n

    def override_args(self, rows: np.ndarray, sets: Sequence[ArgItems]) -> None:
        """Other args for some of the rows so far (`sets[i]` for row `rows[i]`, as items):
        an allocation's size and address on its API call."""
        if not len(rows):
            return
        args = self.column("args").copy()
        args[rows] = self.arg_sets.index_of(sets)
        self.pieces["args"] = [args]

    def column(self, key: str) -> np.ndarray:
        pieces = self.pieces[key]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.int64)

    def keep(self, rows: np.ndarray) -> None:
        """Only the rows where `rows` (a mask over every row so far) is true."""
        for key, pieces in self.pieces.items():
            if pieces:
                self.pieces[key] = [self.column(key)[rows]]
        self.rows = int(rows.sum())

    def common_columns(self) -> CommonColumns:
        """The SliceColumns fields both kinds of rows have."""
        return CommonColumns(
            ts=self.column("ts"),
            dur=self.column("dur"),
            track=self.column("track"),
            name=self.column("name"),
            names=list(self.names.values),
            category=self.column("category"),
            categories=list(self.categories.values),
            args=self.column("args"),
            arg_sets=[dict(items) for items in self.arg_sets.values],
            correlation_id=self.column("correlation_id"),
        )


class CpuRows(Rows):
    """API calls and NVTX ranges (track = thread id), with launch stacks."""

    COLUMNS = (*Rows.COLUMNS, "stack")

    def __init__(self) -> None:
        super().__init__()
        self.stacks: list[model.Stack] = []

    def columns(self) -> model.SliceColumns:
        return model.SliceColumns(
            **self.common_columns(), device=None, stack=self.column("stack"), stacks=self.stacks
        )


class GpuRows(Rows):
    """Kernels, copies, sets and syncs (track = stream of `device`)."""

    COLUMNS = (*Rows.COLUMNS, "device")

    def add_ops(self, c: dict[str, np.ndarray], name: np.ndarray, category: str) -> None:
        """Rows of one GPU record table: its device, stream, times and correlation ids;
        args follow with set_args()."""
        self.add(
            ts=c["start"],
            dur=np.maximum(c["end"] - c["start"], 0),
            track=c["stream"],
            device=c["device"],
            name=name,
            category=self.categories.index_of([category])[0],
            correlation_id=c["correlation_id"],
        )

    def set_args(self, args: np.ndarray) -> None:
        self.pieces["args"].append(args)

    def columns(self) -> model.SliceColumns:
        return model.SliceColumns(**self.common_columns(), device=self.column("device"))
