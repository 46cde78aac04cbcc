"""Lane assignment: keeps every slice, even when slices on one thread or stream overlap.

Perfetto's slice model needs the slices of one track to nest properly.  Real data does
not always: CUDA ops on one stream can overlap (profiler clock skew, concurrent copies),
and Kineto CPU events partially overlap.  Instead of dropping such events (what
Perfetto's JSON importer does), a slice that cannot nest goes to a sibling lane: another
track with the same name under the same parent.

Each lane remembers the slices still open at its latest start.  A slice [s, e) fits a
lane when s is not before the lane's latest start and it nests inside the innermost
slice open at s.  Slices fed in (start, -duration) order fill lane 0 whenever they nest;
a slice that arrives late (start before the lane's latest start) simply skips to a lane
where it is safe, so correctness never depends on the input order.
"""

from __future__ import annotations


class LaneSet:
    """The lanes of one logical track (a thread, or a GPU stream).

    Per lane: the latest start placed on it and the ends of the slices still open at that
    start (innermost last).  Plain lists rather than lane objects: this runs once per slice,
    and the writer's hot loop reads and updates lane 0 of these lists itself (the common
    case: nothing, or one slice that has ended, open on lane 0) and calls place() for the
    rest.
    """

    __slots__ = ("last_starts", "open_ends")

    def __init__(self) -> None:
        self.last_starts: list[int] = [-(1 << 63)]
        self.open_ends: list[list[int]] = [[]]

    def place(self, start: int, dur: int) -> int:
        """Return the lane index the slice [start, start+dur) goes to."""
        end = start + dur if dur > 0 else start
        last_starts = self.last_starts
        for index, stack in enumerate(self.open_ends):
            if start < last_starts[index]:
                continue
            # Slices that ended by `start` are closed; the ones left all contain `start`.
            # Nothing is popped unless the slice is placed here: a lane that refuses it
            # keeps its state for later (late-arriving) slices.
            depth = len(stack)
            while depth and stack[depth - 1] <= start:
                depth -= 1
            if depth and end > stack[depth - 1]:
                continue
            del stack[depth:]
            stack.append(end)
            last_starts[index] = start
            return index
        last_starts.append(start)
        self.open_ends.append([end])
        return len(last_starts) - 1

    @property
    def count(self) -> int:
        return len(self.last_starts)
