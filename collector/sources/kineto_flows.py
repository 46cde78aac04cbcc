"""Flow pairs of a Kineto trace: `s` and `f` events that share a category and an id.

Kineto links events with Chrome flow events: `ac2g` from an API call to the device ops it
caused (any accelerator: CUDA, ROCm, MTIA, ...), `fwdbwd` from a forward op to its backward
op, `async_gpu` in old traces, whatever a plugin adds.  A flow event sits at the start of
the event it belongs to (same pid, tid and ts; Kineto writes it right after that event), so
each end is bound to the complete (`X`) event with that key.  One `s` with several `f`
(a CUDA graph launch and the nodes it ran) is one flow per `f`.

What cannot become a flow is counted by reason: an `s` without `f` or the reverse (Kineto
writes an `f` on the API call of some ops whose start it lost), an end at no event, an
`s` repeated under one id, a flow from an event to itself.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

EndKey = tuple[int, int, int]  # (pid, tid, ts in ns) of the event a flow end belongs to
_FLOW_NAMESPACE = 1 << 62  # keeps these flow ids apart from correlation ones (model.flow_id)
# How many of the latest complete events an end looks back at when it comes after its
# event (Kineto: right after).  An end whose event came earlier than that counts as
# "at no event" and is reported, never half-written.
_RECENT = 1 << 16
# Flow categories whose id is the correlation id of both ends (API call -> device op):
# where the input has such a pair, the pair is the link, not the correlation id.
API_TO_DEVICE_FLOWS = ("ac2g", "async_gpu")


@dataclass
class FlowTables:
    """The scan's result: flow ids starting and ending at each event key."""

    starts: dict[EndKey, list[int]] = field(default_factory=dict)
    ends: dict[EndKey, list[int]] = field(default_factory=dict)
    flows: Counter[str] = field(default_factory=Counter)  # category -> flows made
    skipped: Counter[str] = field(default_factory=Counter)  # reason -> flow events
    # Ids of API->device pairs (their correlation ids).
    api_device_ids: set[int] = field(default_factory=set)


class FlowScan:
    """Collects flow events and which of their ends fall on a complete event."""

    def __init__(self) -> None:
        self._starts: dict[tuple[str, Any], EndKey] = {}
        self._ends: dict[tuple[str, Any], list[EndKey]] = {}
        self._repeated_starts: Counter[str] = Counter()
        self._recent: dict[EndKey, int] = {}
        self._order: deque[EndKey] = deque()
        self._waiting: set[EndKey] = set()  # ends met before any event at their key
        self._bound: set[EndKey] = set()

    def event(self, key: EndKey) -> None:
        """A complete event starts at `key`."""
        if key in self._waiting:
            self._waiting.discard(key)
            self._bound.add(key)
        self._recent[key] = self._recent.get(key, 0) + 1
        self._order.append(key)
        if len(self._order) > _RECENT:
            old = self._order.popleft()
            left = self._recent[old] - 1
            if left:
                self._recent[old] = left
            else:
                del self._recent[old]

    def flow(self, phase: str, category: str, ident: Any, key: EndKey) -> None:
        """A flow event (`s` or `f`) of `category` and `ident` at `key`."""
        if key in self._recent:
            self._bound.add(key)
        elif key not in self._bound:
            self._waiting.add(key)
        pair = (category, ident)
        if phase == "s":
            if pair in self._starts:
                self._repeated_starts[category] += 1
            else:
                self._starts[pair] = key
        else:
            self._ends.setdefault(pair, []).append(key)

    def finish(self) -> FlowTables:
        tables = FlowTables()
        for category, n in self._repeated_starts.items():
            tables.skipped[f"'{category}' flow starts repeated under one id"] += n
        n_flows = 0
        for pair, start in self._starts.items():
            category = pair[0]
            ends = self._ends.pop(pair, None)
            if not ends:
                tables.skipped[f"'{category}' flow starts without an end"] += 1
                continue
            if category in API_TO_DEVICE_FLOWS and isinstance(pair[1], int):
                tables.api_device_ids.add(pair[1])
            for end in ends:
                if start not in self._bound or end not in self._bound:
                    tables.skipped[f"'{category}' flow pairs with an end at no event"] += 1
                elif end == start:
                    tables.skipped[f"'{category}' flow pairs from an event to itself"] += 1
                else:
                    n_flows += 1
                    fid = _FLOW_NAMESPACE | n_flows
                    tables.starts.setdefault(start, []).append(fid)
                    tables.ends.setdefault(end, []).append(fid)
                    tables.flows[category] += 1
        for (category, _), ends in self._ends.items():
            tables.skipped[f"'{category}' flow ends without a start"] += len(ends)
        return tables
