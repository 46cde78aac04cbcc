"""The shapes a kept answer must have to stand for its statement's (cached_trace.py asks
the result store for an answer only in the shape its method returns): anything else, even
with a good checksum, is a miss and the engine answers."""

from __future__ import annotations

import itertools
from typing import Any

# What the engine's cells are once through JSON (bool is not one: SQL has no booleans).
_CELL_TYPES = frozenset({int, float, str, type(None)})


def _lists_ok(lists: Any, width: int | None = None) -> bool:
    """A list of lists of cells, each `width` long where given.  The types are gathered by
    map() in C: a big answer is checked in a fraction of the time its JSON takes to parse."""
    if type(lists) is not list or not set(map(type, lists)) <= {list}:
        return False
    if width is not None and not set(map(len, lists)) <= {width}:
        return False
    return set(map(type, itertools.chain.from_iterable(lists))) <= _CELL_TYPES


def _names_ok(columns: Any) -> bool:
    return type(columns) is list and all(type(c) is str for c in columns)


def rows(kept: Any) -> bool:
    """{"columns": [name, ...], "rows": [[cell, ...], ...]}, every row as wide as columns."""
    if type(kept) is not dict or kept.keys() != {"columns", "rows"}:
        return False
    columns, table = kept["columns"], kept["rows"]
    if not _names_ok(columns):
        return False
    return _lists_ok(table, len(columns))


def values(kept: Any) -> bool:
    """{"columns": [name, ...], "values": [[cell, ...] per column]}, columns of one length."""
    if type(kept) is not dict or kept.keys() != {"columns", "values"}:
        return False
    columns, cells = kept["columns"], kept["values"]
    if not _names_ok(columns) or type(cells) is not list or len(cells) != len(columns):
        return False
    return _lists_ok(cells) and len(set(map(len, cells))) <= 1


def nothing(kept: Any) -> bool:
    """A statement run for its effect answers nothing."""
    return kept is None
