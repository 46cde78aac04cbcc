"""collector/arrays.py: each helper gives exactly the plain numpy (or Python) result it names,
on random inputs and on the edges (no rows, one row, the int64 extremes, negative values,
narrow and boolean dtypes, keys too wide to join into one column)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collector.arrays import (
    first_seen_codes,
    group_rows_by_keys,
    rows_by_keys,
    stable_argsort,
    stable_argsort_by_rank,
    unique_with_inverse,
)

I64 = np.iinfo(np.int64)
EDGES = [
    np.zeros(0, np.int64),
    np.array([7], np.int64),
    np.array([I64.max, I64.min, 0, -1, I64.max, I64.min], np.int64),
    np.array([-(1 << 15), (1 << 15) - 1, 0, -(1 << 15)], np.int64),  # the int16 bounds
    np.array([-(1 << 15) - 1, (1 << 15), 0], np.int64),  # just past them
    np.array([3, 1, 3, 2, 1, 3], np.int8),
    np.array([True, False, True, True], bool),
    np.array([np.iinfo(np.uint64).max, 0, 1 << 63, 5], np.uint64),
]


def _random_columns(seed: int, n: int, spread: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(-spread, spread + 1, n).astype(np.int64)


def _reference_groups(keys: list[np.ndarray]) -> tuple[list[int], list[int], list[list[int]]]:
    """Plain Python: the rows' key tuples, their distinct values sorted; each row's index
    among them, each group's first row, each group's rows."""
    rows = list(zip(*(k.tolist() for k in keys), strict=True))
    distinct = sorted(set(rows))
    index = {t: i for i, t in enumerate(distinct)}
    members: list[list[int]] = [[] for _ in distinct]
    for i, t in enumerate(rows):
        members[index[t]].append(i)
    return [index[t] for t in rows], [m[0] for m in members], members


@pytest.mark.parametrize("values", EDGES, ids=lambda v: f"{v.dtype}x{v.size}")
def test_stable_argsort_edges(values: np.ndarray) -> None:
    want = np.argsort(values, kind="stable")
    assert stable_argsort(values).tolist() == want.tolist()
    assert stable_argsort_by_rank(values.astype(np.int64)).tolist() == (
        np.argsort(values.astype(np.int64), kind="stable").tolist()
    )


@pytest.mark.parametrize("spread", [0, 3, 200, 40_000, 1 << 40])
def test_stable_argsort_is_numpys_stable_argsort(spread: int) -> None:
    """Within the 16-bit radix sort (spread 0..200), past it (40k) and sparse; ties many."""
    values = _random_columns(spread, 5000, spread)
    want = np.argsort(values, kind="stable").tolist()
    assert stable_argsort(values).tolist() == want
    if spread < 1 << 31:
        assert stable_argsort(values.astype(np.int32)).tolist() == want
    assert stable_argsort_by_rank(values).tolist() == want
    # Ties in input order, as a plain Python sort keeps them.
    assert want == sorted(range(len(values)), key=lambda i: values[i])


@pytest.mark.parametrize("spread", [3, 40_000, 1 << 40])
def test_unique_with_inverse_is_numpys_unique(spread: int) -> None:
    """np.unique's values and inverse, for keys close together (the table), past 16 bits
    of codes, and sparse (the sort), with -1 (no device) among them."""
    rng = np.random.default_rng(spread)
    values = np.r_[rng.integers(-1, spread, 5000), -1].astype(np.int64)
    want_values, want_index = np.unique(values, return_inverse=True)
    got_values, got_index = unique_with_inverse(values)
    assert got_values.tolist() == want_values.tolist()
    assert got_index.tolist() == want_index.tolist()
    assert got_index.dtype == np.int64


@pytest.mark.parametrize("values", [v for v in EDGES if v.dtype == np.int64])
def test_unique_with_inverse_edges(values: np.ndarray) -> None:
    want_values, want_index = np.unique(values, return_inverse=True)
    got_values, got_index = unique_with_inverse(values)
    assert got_values.tolist() == want_values.tolist()
    assert got_index.tolist() == want_index.tolist()


def test_first_seen_codes_in_order_of_appearance() -> None:
    names = np.array(["b", "a", "b", None, "c", "a", None], dtype=object)
    values, index = first_seen_codes(names)
    assert values == ["b", "a", None, "c"]
    assert index.tolist() == [0, 1, 0, 2, 3, 1, 2]
    assert index.dtype == np.int64
    empty_values, empty_index = first_seen_codes([])
    assert empty_values == [] and empty_index.size == 0
    rng = np.random.default_rng(5)
    words = [f"k{i}" for i in rng.integers(0, 300, 4000).tolist()]
    values, index = first_seen_codes(words)
    assert values == list(dict.fromkeys(words))
    assert [values[i] for i in index.tolist()] == words


def _check_grouping(keys: list[np.ndarray]) -> None:
    want_group, want_first, want_rows = _reference_groups(keys)
    group, first = group_rows_by_keys(*keys)
    assert group.tolist() == want_group
    assert first.tolist() == want_first
    assert group.dtype == np.int64
    assert [r.tolist() for r in rows_by_keys(*keys)] == want_rows


@pytest.mark.parametrize(
    "spreads",
    [(3,), (2, 5), (4, 1 << 20, 2), (1 << 31, 1 << 31), (1 << 40, 1 << 40)],  # last: a lexsort
)
@pytest.mark.parametrize("n", [0, 1, 2, 3000])
def test_grouping_is_pythons_on_random_keys(spreads: tuple[int, ...], n: int) -> None:
    keys = [_random_columns(i * 7 + n, n, s) for i, s in enumerate(spreads)]
    _check_grouping(keys)


@pytest.mark.parametrize("values", EDGES, ids=lambda v: f"{v.dtype}x{v.size}")
def test_grouping_edges(values: np.ndarray) -> None:
    """One key of every edge, and each beside a small key (negative) and beside itself
    (extremes twice: too wide to join, the lexsort)."""
    _check_grouping([values])
    small = (np.arange(values.size, dtype=np.int64) % 3) - 1
    _check_grouping([small, values])
    _check_grouping([values, values])


def test_grouping_keys_joined_near_the_int64_edge() -> None:
    """Narrow keys joined into one column whatever their values: a constant first key
    near the int64 edges, a second key whose values would carry the join past them."""
    for constant in (I64.max // 3, I64.max, I64.min, -(I64.max // 3)):
        _check_grouping([np.full(3, constant, np.int64), np.array([2, 0, 1], np.int64)])
        _check_grouping([np.array([2, 0, 1], np.int64), np.full(3, constant, np.int64)])


def test_grouping_float_keys_take_the_lexsort() -> None:
    ts = np.array([0.5, -1.0, 0.5, np.inf, -1.0])
    _check_grouping([ts, np.array([1, 1, 1, 0, 2], np.int64)])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(I64.min, I64.max), st.integers(-3, 3), st.sampled_from([0, 1 << 62])),
        max_size=40,
    )
)
def test_grouping_any_int64_rows(rows: list[tuple[int, int, int]]) -> None:
    keys = [np.array([r[k] for r in rows], np.int64) for k in range(3)]
    _check_grouping(keys)
    _check_grouping(keys[1:])
