"""The cyclic garbage collector paused while a command streams millions of objects.

`convert` keeps two chunks of events in columns and the objects of what they leave, and
the writer a window of slices (its reorder window): every one of them survives the young
collections and is traversed by each of them before it is freed by its reference count,
a large share of a conversion's CPU time (docs/benchmarks.md, "Big traces").  The
objects of the stream form no cycles, so reference counting frees them; the collector
still runs every COLLECT_EVERY objects of the stream, so that a cycle made elsewhere
cannot pile up.
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")
COLLECT_EVERY = 1 << 20


def collected_now_and_then(items: Iterable[T], every: int = COLLECT_EVERY) -> Iterator[T]:
    """`items` with the automatic collector off while they stream (back to what it was
    when they end or the consumer stops), and a full collection every `every` items."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        left = every
        for item in items:
            yield item
            left -= 1
            if not left:
                gc.collect()
                left = every
    finally:
        if was_enabled:
            gc.enable()
