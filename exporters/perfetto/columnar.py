"""Packets assembled for many rows at once (numpy): the writer's path for slices in columns.

A packet is a run of fields.  Here each field is a *slot* of fixed width, the widest value
any row needs, and a mask says which of a row's slot bytes it really uses (a 1-byte varint
in a 3-byte slot uses one).  The packets are then the used bytes of a (rows x width)
matrix in row-major order: one boolean compaction, no per-packet Python work.

Slots: constant bytes, a per-row choice from a table of byte strings (cached event heads,
END packets, packet tails), a varint of a per-row value, and lists of fixed64 flow ids.
Absent fields have length 0.  Each slot knows its per-row lengths before anything is
written, so enclosing lengths (the track event's, the frame's) are sums of slot lengths.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_U64 = np.uint64


def varint_lengths(values: np.ndarray) -> np.ndarray:
    """Bytes in the base-128 varint of each value (uint64; int64 as two's complement)."""
    v = values.astype(np.uint64, copy=False)
    n = np.ones(len(v), np.int64)
    for k in range(1, 10):
        more = v >= _U64(1 << (7 * k))
        if not more.any():
            break
        n += more
    return n


class Slot:
    """One field of every row: `lengths` (bytes per row, 0 = absent) and `width`."""

    lengths: np.ndarray
    width: int

    def write(self, out: np.ndarray, mask: np.ndarray) -> None:
        """Fill this slot's columns of the row matrix and of the used-bytes mask."""
        raise NotImplementedError


class Const(Slot):
    """The same bytes in every row where `present` (all rows for None)."""

    def __init__(self, data: bytes, rows: int, present: np.ndarray | None = None) -> None:
        self.data = np.frombuffer(data, np.uint8)
        self.present = present
        self.width = len(data)
        self.lengths = (
            np.full(rows, len(data), np.int64)
            if present is None
            else present.astype(np.int64) * len(data)
        )

    def write(self, out: np.ndarray, mask: np.ndarray) -> None:
        out[:] = self.data
        mask[:] = True if self.present is None else self.present[:, None]


class ByteTable:
    """Byte strings as rows of a zero-padded matrix (and one empty row last, for index -1):
    built once, then chosen from per row by many Table slots."""

    def __init__(self, entries: Sequence[bytes]) -> None:
        width = max(map(len, entries), default=0)
        self.matrix = np.zeros((len(entries) + 1, width), np.uint8)
        self.sizes = np.zeros(len(entries) + 1, np.int64)
        for i, data in enumerate(entries):
            self.matrix[i, : len(data)] = np.frombuffer(data, np.uint8)
            self.sizes[i] = len(data)
        # Each entry's used bytes: gathered per row like the bytes (np.take of rows is
        # several times faster than comparing a column range with per-row lengths).
        self.used = np.arange(width) < self.sizes[:, None]
        self._narrow: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def narrow(self, width: int) -> tuple[np.ndarray, np.ndarray]:
        """The first `width` columns of the bytes and the used-bytes matrix, contiguous."""
        pair = self._narrow.get(width)
        if pair is None:
            pair = self._narrow[width] = (
                np.ascontiguousarray(self.matrix[:, :width]),
                np.ascontiguousarray(self.used[:, :width]),
            )
        return pair


class Table(Slot):
    """Row i holds entry `index[i]` of `table`; nothing where the index is -1."""

    def __init__(self, table: ByteTable, index: np.ndarray) -> None:
        self.table = table
        self.index = index
        self.lengths = table.sizes[index]
        self.width = int(self.lengths.max(initial=0))

    def write(self, out: np.ndarray, mask: np.ndarray) -> None:
        if self.width:
            data, used = self.table.narrow(self.width)
            out[:] = np.take(data, self.index, axis=0)
            mask[:] = np.take(used, self.index, axis=0)


class Varint(Slot):
    """The varint of `values[i]` where `present` (all rows for None)."""

    def __init__(self, values: np.ndarray, present: np.ndarray | None = None) -> None:
        values = values.astype(np.uint64, copy=False)
        lengths = varint_lengths(values)
        if present is not None:
            lengths = lengths * present
        self.lengths = lengths
        self.width = int(lengths.max(initial=0))
        # 32-bit arithmetic where every value fits (timestamps deltas, lengths, ids).
        self.values = values.astype(np.uint32) if self.width <= 4 else values

    def write(self, out: np.ndarray, mask: np.ndarray) -> None:
        v = self.values
        kind = v.dtype.type
        lengths = self.lengths
        for j in range(self.width):
            low = ((v >> kind(7 * j)) & kind(0x7F)).astype(np.uint8)
            more = lengths > j + 1
            out[:, j] = low | (more.view(np.uint8) << 7)
            mask[:, j] = more | (lengths == j + 1)


class Fixed64s(Slot):
    """`counts[i]` fixed64 fields with the 2-byte `tag`, values taken in row order from
    `ids` (flow ids: a graph launch starts one flow per kernel)."""

    def __init__(self, tag: int, counts: np.ndarray, ids: np.ndarray) -> None:
        self.tag = np.frombuffer(tag.to_bytes(2, "little"), np.uint8)
        self.counts = counts
        self.ids = ids.astype("<u8", copy=False)
        self.most = int(counts.max(initial=0))
        self.width = 10 * self.most
        self.lengths = counts.astype(np.int64) * 10

    def write(self, out: np.ndarray, mask: np.ndarray) -> None:
        if not self.most:
            return
        rows = len(self.counts)
        fields = np.zeros((rows, self.most, 10), np.uint8)
        row = np.repeat(np.arange(rows), self.counts)
        starts = np.cumsum(self.counts) - self.counts
        nth = np.arange(len(row)) - np.repeat(starts, self.counts)
        fields[row, nth, :2] = self.tag
        fields[row, nth, 2:] = self.ids.view(np.uint8).reshape(-1, 8)
        out[:] = fields.reshape(rows, self.width)
        mask[:] = np.repeat(np.arange(self.most) < self.counts[:, None], 10, axis=1)


def total_length(slots: Sequence[Slot]) -> np.ndarray:
    """Per-row bytes of `slots` together (a length-delimited field's length)."""
    out = slots[0].lengths.copy()
    for slot in slots[1:]:
        out += slot.lengths
    return out


def assemble(rows: int, slots: Sequence[Slot]) -> bytes:
    """The rows' bytes, slot after slot, row after row."""
    width = sum(slot.width for slot in slots)
    # Every slot writes all of its columns (bytes and mask), so nothing needs zeroing.
    out = np.empty((rows, width), np.uint8)
    mask = np.empty((rows, width), bool)
    col = 0
    for slot in slots:
        if slot.width:
            end = col + slot.width
            slot.write(out[:, col:end], mask[:, col:end])
            col = end
    return out[mask].tobytes()
