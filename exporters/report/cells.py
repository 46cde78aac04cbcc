"""One report cell -> text, shared by the terminal and HTML renderings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exporters.report import units
from exporters.report.queries import Column

# Long stacks are shown as the thread, then the frames nearest the leaf.
STACK_TAIL_FRAMES = 4


def cell_text(column: Column, value: Any) -> str:
    if value is None:
        return "-"
    kind = column.kind
    if kind == "ns":
        return units.duration(value)
    if kind == "pct":
        return units.percent(value)
    if kind == "count":
        return units.count(value)
    if kind == "bytes":
        return units.byte_count(value)
    if kind == "gbps":
        return units.rate_gbps(value)
    if kind == "stack":
        return short_stack(str(value))
    return str(value)


def short_stack(stack: str, tail: int = STACK_TAIL_FRAMES) -> str:
    """`thread;a;b;c;d;e;f` -> `thread;…;c;d;e;f` (a plain name stays as it is)."""
    frames = stack.split(";")
    if len(frames) <= tail + 2:
        return stack
    return ";".join([frames[0], "…", *frames[-tail:]])


def is_numeric(column: Column) -> bool:
    return column.kind not in ("text", "name", "kernel", "stack")


def cut(text: str, width: int, keep_end: bool, scopes: bool = False) -> str:
    """`text` in at most `width` characters, '…' where it was cut: stacks keep their leaf
    end (the caller nearest the work); names lose their middle, so both the start and the
    end read (a kernel's telling template argument, a function's file, sit at the end).
    `scopes`: a qualified C++ name first loses its outer scopes, whole (`…::Name` reads
    where `torch::autogra…_functional` told five functions of one namespace alike)."""
    if len(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]
    if keep_end:
        return "…" + text[-(width - 1) :]
    starts = _scope_starts(text) if scopes else []
    for start in starts:
        if len(text) - start + 1 <= width:
            return "…" + text[start:]
    if starts and width > 2:
        return "…" + _cut_middle(text[starts[-1] :], width - 1)
    return _cut_middle(text, width)


def _cut_middle(text: str, width: int) -> str:
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def _scope_starts(name: str) -> list[int]:
    """Where the name after each `::` of the outermost level begins (never inside a
    template's `<>`, a parameter list's `()` or brackets)."""
    starts: list[int] = []
    depth = i = 0
    while i < len(name) - 1:
        c = name[i]
        if c in "<([":
            depth += 1
        elif c in ">)]":
            depth = max(0, depth - 1)
        elif c == ":" and name[i + 1] == ":" and depth == 0:
            starts.append(i + 2)
            i += 2
            continue
        i += 1
    return starts


def distinct_tails(paths: Sequence[str]) -> dict[str, str]:
    """Each path -> the shortest end of it (whole components) that no other path ends in:
    the file name, or `dir/name` where files of one name sit in several directories; one
    path the end of another keeps its whole self.  The same path twice is one trace."""
    parts = {p: p.rstrip("/").split("/") for p in dict.fromkeys(paths)}
    depth = dict.fromkeys(parts, 1)
    while True:
        label = {p: "/".join(parts[p][-depth[p] :]) for p in parts}
        holders: dict[str, list[str]] = {}
        for p, text in label.items():
            holders.setdefault(text, []).append(p)
        grow = [
            p
            for clash in holders.values()
            if len(clash) > 1
            for p in clash
            if depth[p] < len(parts[p])
        ]
        if not grow:
            return label
        for p in grow:
            depth[p] += 1
