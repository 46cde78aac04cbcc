"""A report section: a titled table of rows and how each column reads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    key: str  # column of the SQL result
    title: str
    # text | name (long) | stack | id (a number as it is: pid, rank) | count | ns | pct
    # | bytes | gbps
    kind: str = "text"
    # > 0: dropped from a terminal table that does not fit its width, highest first
    optional: int = 0


@dataclass(frozen=True)
class Section:
    key: str
    title: str
    columns: tuple[Column, ...]
    rows: list[dict[str, Any]]
    empty: str  # what to say when there are no rows
    note: str = ""
