"""The shapes a kept answer must have to stand for its statement's (cached_trace.py asks
the result store for an answer only in the shape its method returns): anything else, even
with a good checksum, is a miss and the engine answers."""

from __future__ import annotations

from typing import Any

# What the engine's cells are once through JSON (bool is not one: SQL has no booleans).
_CELL_TYPES = frozenset({int, float, str, type(None)})


def _cells_ok(cells: Any) -> bool:
    return type(cells) is list and all(type(c) in _CELL_TYPES for c in cells)


def _names_ok(columns: Any) -> bool:
    return type(columns) is list and all(type(c) is str for c in columns)


def rows(kept: Any) -> bool:
    """{"columns": [name, ...], "rows": [[cell, ...], ...]}, every row as wide as columns."""
    if type(kept) is not dict or kept.keys() != {"columns", "rows"}:
        return False
    columns, table = kept["columns"], kept["rows"]
    if not _names_ok(columns) or type(table) is not list:
        return False
    width = len(columns)
    return all(_cells_ok(row) and len(row) == width for row in table)


def values(kept: Any) -> bool:
    """{"columns": [name, ...], "values": [[cell, ...] per column]}, columns of one length."""
    if type(kept) is not dict or kept.keys() != {"columns", "values"}:
        return False
    columns, cells = kept["columns"], kept["values"]
    if not _names_ok(columns) or type(cells) is not list or len(cells) != len(columns):
        return False
    return all(_cells_ok(column) for column in cells) and len({len(c) for c in cells}) <= 1


def nothing(kept: Any) -> bool:
    """A statement run for its effect answers nothing."""
    return kept is None
