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

from dataclasses import dataclass, field


@dataclass(slots=True)
class _Lane:
    index: int
    last_start: int = -(1 << 63)
    open_ends: list[int] = field(default_factory=list)  # innermost last

    def try_place(self, start: int, end: int) -> bool:
        if start < self.last_start:
            return False
        stack = self.open_ends
        # Slices that ended by `start` are closed; what remains all contain `start`.
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            return False
        stack.append(end)
        self.last_start = start
        return True


class LaneSet:
    """The lanes of one logical track (a thread, or a GPU stream)."""

    __slots__ = ("_lanes",)

    def __init__(self) -> None:
        self._lanes: list[_Lane] = [_Lane(0)]

    def place(self, start: int, dur: int) -> int:
        """Return the lane index the slice [start, start+dur) goes to."""
        end = start + max(dur, 0)
        for lane in self._lanes:
            if lane.try_place(start, end):
                return lane.index
        lane = _Lane(len(self._lanes))
        lane.try_place(start, end)
        self._lanes.append(lane)
        return lane.index

    @property
    def count(self) -> int:
        return len(self._lanes)
