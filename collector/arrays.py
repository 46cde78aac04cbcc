"""Array helpers that producers, the writer and the readers share: sorting and grouping rows
of integer columns, each the plain numpy (or Python) result computed a faster way.

Each function says what it returns in plain numpy terms first (tests/test_arrays.py holds
it to exactly that on random inputs, with the edge cases), then why it is computed another
way.  The ways are numpy facts: its stable sort is a radix sort (linear) for integers of
16 bits or fewer and a merge sort otherwise; one sort of one int64 column is cheaper than
a lexsort of several; a table indexed by value needs no sort at all where the values lie
close together."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

import numpy as np

_INT16_MIN, _INT16_MAX = np.iinfo(np.int16).min, np.iinfo(np.int16).max
# Combined keys stay below this (spans multiplied), so no int64 step can overflow.
_COMBINED_LIMIT = 1 << 62

H = TypeVar("H", bound=Hashable)


def stable_argsort(values: np.ndarray) -> np.ndarray:
    """np.argsort(values, kind="stable").  Integers that fit 16 bits are sorted as int16:
    for those numpy's stable sort is a radix sort, several times faster than the merge sort
    it runs on wider integers (device, stream and group codes are mostly that small)."""
    if values.dtype.kind in "iu" and values.size:
        lo, hi = int(values.min()), int(values.max())
        if lo >= _INT16_MIN and hi <= _INT16_MAX:
            values = values.astype(np.int16)
    return np.argsort(values, kind="stable")


def unique_with_inverse(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(values, return_inverse=True) of int64 values: the distinct values, sorted,
    and each value's index among them.  Keys such as devices, streams and kinds are few and
    close together: a table over their range marks the present ones without sorting, which
    is many times cheaper than np.unique's sort; sparse values still take the sort."""
    if values.size == 0:
        return values.astype(np.int64), np.zeros(0, dtype=np.int64)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo > 4 * values.size + (1 << 16):  # sparse: the sort is cheaper than the table
        distinct, inverse = np.unique(values, return_inverse=True)
        return distinct, inverse.astype(np.int64, copy=False)
    present = np.zeros(hi - lo + 1, dtype=bool)
    present[values - lo] = True
    index = np.cumsum(present, dtype=np.int64) - 1
    return np.flatnonzero(present) + lo, index[values - lo]


def stable_argsort_by_rank(values: np.ndarray) -> np.ndarray:
    """np.argsort(values, kind="stable") of integers with few distinct values (devices,
    streams, (device, kind) groups): sorted by each value's rank among the distinct ones,
    which fits 16 bits where they are that few (stable_argsort's radix sort)."""
    _, rank = unique_with_inverse(values)
    return stable_argsort(rank)


def first_seen_codes(values: np.ndarray | Sequence[H]) -> tuple[list[H], np.ndarray]:
    """The distinct values in order of first appearance, and each value's index among them
    (int64).  For Python objects such as names: a dict does it in one pass, where numpy's
    unique would sort the objects by Python comparisons, many times slower."""
    cells = values.tolist() if isinstance(values, np.ndarray) else values
    seen: dict[H, int] = {}
    index = [seen.setdefault(v, len(seen)) for v in cells]
    return list(seen), np.array(index, dtype=np.int64)


def _combined_key(keys: Sequence[np.ndarray]) -> np.ndarray | None:
    """One int64 column that orders the rows as the keys do together (the first key most
    significant): each key shifted to start at 0 and the keys joined in mixed radix, their
    ranges multiplied.  None where the keys are not integers or the product passes 2**62."""
    n = len(keys[0])
    combined = np.zeros(n, np.int64)
    if n == 0:
        return combined
    total = 1
    for key in keys:
        if key.dtype.kind not in "iub":
            return None
        lo, hi = int(key.min()), int(key.max())
        span = hi - lo + 1
        total *= span
        if total > _COMBINED_LIMIT:
            return None
        combined *= span
        combined += key.astype(np.int64) - lo
    return combined


def group_rows_by_keys(*keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(group of each row, first row of each group) for rows equal in all `keys` (columns of
    one length): groups are numbered in the sorted order of their keys (the first key most
    significant), as np.unique over the rows' key tuples numbers them, and a group's first
    row is the earliest.  Integer keys whose ranges multiply to under 2**62 are joined into
    one int64 column sorted once (a lexsort of several columns costs a sort pass per
    column); other keys take the lexsort."""
    n = len(keys[0])
    combined = _combined_key(keys)
    if combined is not None:
        order = stable_argsort(combined)
        ordered = combined[order]
        new = np.ones(n, bool)
        new[1:] = ordered[1:] != ordered[:-1]
    else:
        order = np.lexsort(keys[::-1])
        new = np.ones(n, bool)
        if n > 1:
            same = np.ones(n - 1, bool)
            for key in keys:
                sorted_key = key[order]
                same &= sorted_key[1:] == sorted_key[:-1]
            new[1:] = ~same
    groups = np.empty(n, np.int64)
    groups[order] = np.cumsum(new) - 1
    return groups, order[new]


def rows_by_keys(*keys: np.ndarray) -> list[np.ndarray]:
    """The rows of each distinct combination of `keys` (columns of one length), the
    combinations in sorted order (the first key most significant) and each one's rows in
    input order; [] for no rows.  One stable sort of the keys joined into one column where
    they fit (group_rows_by_keys), a lexsort otherwise."""
    if len(keys[0]) == 0:
        return []
    combined = _combined_key(keys)
    if combined is None:
        combined, _ = group_rows_by_keys(*keys)
    order = stable_argsort(combined)
    bounds = np.flatnonzero(np.diff(combined[order])) + 1
    return np.split(order, bounds)
