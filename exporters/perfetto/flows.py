"""Flow ids: the small, recycled ids the writer writes for the sources' flows."""

from __future__ import annotations

from collections.abc import Iterable
from heapq import heappop, heappush

from exporters.perfetto import wire

_FLOW = wire.FLOW
_FLOW_TAG = wire.FLOW_TAG
_TERMINATING_FLOW_TAG = wire.TERMINATING_FLOW_TAG


class FlowIds:
    """Source flow ids -> the flow ids written: small ones, recycled.

    Sources name a flow after its correlation (`pid << 32 | correlation id`): large,
    unique numbers that cost up to 8 incompressible bytes per end.  trace_processor only
    pairs the two ends of a flow (the id is not in the flow table) and lets an id be used
    again once its flow has ended, so a producer hands out the smallest free id; ids then
    repeat a lot and deflate well.  Each producer has ids of its own (`base`).

    trace_processor pairs ends in timestamp order, and an id may be recycled only if that
    is also the order in which the producer encoded them: true for slices encoded in time
    order on one sequence, false for a "late" slice (behind the latest BEGIN) or across a
    change of sequence (the new one goes back in time).  So only flows begun in time order
    since the last change of sequence give their id back; a flow begun late, or whose end
    is written first (its start may be late, i.e. earlier), gets an id never recycled.
    Packets of one time are read in file order, and the file holds them track by track
    (see Sequence.track_clock), so an id freed at time t is taken again only after t.
    """

    def __init__(self, base: int) -> None:
        # Attributes the hot loop uses directly for its single-id cases.
        self.begun: dict[int, int] = {}  # source id -> id: begun, not yet ended
        self.ended_first: dict[int, int] = {}  # source id -> id: end written before start
        self.free: list[int] = []  # min-heap of recyclable ids
        # Ids whose flows ended at time `freed_at`: recyclable from the next time on.
        self.freed: list[int] = []
        self.freed_at = 0
        self.next_id = self.recycle_from = base + 1
        self.next_unrecycled = self.unrecycled_from = base + (1 << 40)

    def new_sequence(self) -> None:
        """The producer's packets go back in time: no id given out so far is recycled."""
        self.free.clear()
        self.freed.clear()
        self.recycle_from = self.next_id

    def _new(self, late: bool) -> int:
        if late:
            self.next_unrecycled += 1
            return self.next_unrecycled - 1
        if self.free:
            return heappop(self.free)
        self.next_id += 1
        return self.next_id - 1

    def starts(self, source_ids: Iterable[int], late: bool) -> bytes:
        """The encoded `flow_ids` of a slice that starts (or continues) these flows."""
        out = []
        for source in source_ids:
            fid = self.begun.get(source)
            if fid is None:
                fid = self.ended_first.pop(source, None)
                if fid is None:
                    fid = self.begun[source] = self._new(late)
            out.append(_FLOW.pack(_FLOW_TAG, fid))
        return b"".join(out)

    def ends(self, source_ids: Iterable[int], late: bool, ts: int) -> bytes:
        """The encoded `terminating_flow_ids` of a slice at `ts` that ends these flows."""
        out = []
        for source in source_ids:
            fid = self.begun.pop(source, None)
            if fid is None:
                fid = self.ended_first[source] = self._new(True)
            elif self.recycle_from <= fid < self.unrecycled_from:
                if late:  # earlier than any slice still to come
                    heappush(self.free, fid)
                else:
                    self.freed.append(fid)
                    self.freed_at = ts
            out.append(_FLOW.pack(_TERMINATING_FLOW_TAG, fid))
        return b"".join(out)
