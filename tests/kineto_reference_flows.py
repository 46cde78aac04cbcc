"""The reference converter's flows (tests/kineto_reference.py): a Kineto trace's flows
linked as the events stream past, in bounded memory, one event object at a time.  The
columnar conversion (collector/sources/kineto_columns.py) must make the same flows and
count the same flow events by reason; this is the behaviour it is held to.

Kineto links events two ways:
- flow pairs: `s` and `f` events that share a category and an id: `ac2g` from an API call
  to the device ops it caused (any accelerator: CUDA, ROCm, MTIA, ...), `fwdbwd` from a
  forward op to its backward op, `async_gpu` in old traces, whatever a plugin adds.  A flow
  event sits at the start of the event it belongs to (same pid, tid and ts; Kineto writes
  it right after that event), so each end is bound to the first complete (`X`) event with
  that key.  One `s` with several `f` (a CUDA graph launch and the nodes it ran) is one
  flow per `f`;
- the correlation id in the args of an API call and of its device ops, where the input has
  no `ac2g`/`async_gpu` pair for it (traces without flow events).  A launch that caused n
  ops starts n flows.

Perfetto needs both ends of a flow to carry its id (`flow_ids` on the start,
`terminating_flow_ids` on the end), and Kineto writes an API call and its device ops in no
fixed order (device ops first, or last).  Instead of a first pass over the file that learns
every link (a table per API call and op: ~110 B per slice, 1.4 GB at 10M slices), complete
events wait in a window of the last WINDOW events (`FlowLinker.push`): an event leaves the
window with its flows once WINDOW later events have come, and every link whose two ends
are less than WINDOW events apart is made while both are in it.  What is farther apart is
counted by reason, never half-written.  Real traces keep the two ends close: a few events
apart (CUDA), ~2,000 (MTIA inference), where a window holds 65,536.

What cannot become a flow is counted by reason: an `s` without `f` or the reverse (Kineto
writes an `f` on the API call of some ops whose start it lost), an end at no event, an
`s` repeated under one id, a flow from an event to itself, two ends farther apart than the
window.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

from collector import model
from collector.sources.kineto_events import API_TO_DEVICE_FLOWS

EndKey = tuple[int, int, int]  # (pid, tid, ts in ns) of the event a flow end belongs to
_FLOW_NAMESPACE = 1 << 62  # keeps these flow ids apart from correlation ones (model.flow_id)
# Complete events held back for their links (in arrival order), and how long a flow end or
# pair waits for its other half, in events.  65,536 events hold ~60 MB.
WINDOW = 1 << 16
# Roles of an event in correlation links.
NO_ROLE, API_CALL, DEVICE_OP = 0, 1, 2


class Slot:
    """One event in the window: what is written (`item`, finished by the source when the
    slot leaves) and the flows it starts (`out`) and ends (`into`)."""

    __slots__ = ("corr", "gone", "into", "item", "key", "out", "role")

    def __init__(self, item: Any, role: int = NO_ROLE, corr: int | None = None) -> None:
        self.item = item
        self.role = role
        self.corr = corr
        self.out: list[int] | None = None
        self.into: list[int] | None = None
        self.key: EndKey | None = None
        self.gone = False

    def start(self, fid: int) -> None:
        if self.out is None:
            self.out = [fid]
        else:
            self.out.append(fid)

    def end(self, fid: int) -> None:
        if self.into is None:
            self.into = [fid]
        else:
            self.into.append(fid)


class _End:
    """A flow event (`s` or `f`): the slot it is bound to, once one is met at its key."""

    __slots__ = ("pair", "slot")

    def __init__(self, pair: _Pair, slot: Slot | None) -> None:
        self.pair = pair
        self.slot = slot


class _Pair:
    """The flow events of one (category, id): its start and its ends not linked yet."""

    __slots__ = ("category", "ends", "ident", "n_ends", "start", "touched")

    def __init__(self, category: str, ident: Any) -> None:
        self.category = category
        self.ident = ident
        self.start: _End | None = None
        self.ends: list[_End] = []
        self.n_ends = 0
        self.touched = 0


class _Correlation:
    """The API calls and device ops of one correlation id that are in the window."""

    __slots__ = ("apis", "next_index", "ops")

    def __init__(self) -> None:
        # Lists, not deques: nearly always one call and one op (a deque is ~600 B).
        self.apis: list[Slot] = []
        self.ops: list[Slot] = []
        self.next_index = 0


class FlowLinker:
    """The window and the links made in it (see the module docstring)."""

    def __init__(self, window: int = WINDOW) -> None:
        self.window = window
        self._slots: deque[Slot] = deque()
        self._seq = 0
        self._by_key: dict[EndKey, Slot] = {}  # first complete event at a key
        self._waiting: dict[EndKey, list[_End]] = {}  # flow ends met before their event
        self._waiting_order: deque[tuple[int, EndKey]] = deque()
        self._pairs: dict[tuple[str, Any], _Pair] = {}
        self._pair_order: deque[tuple[int, tuple[str, Any]]] = deque()
        self._n_pair_flows = 0
        self._correlations: dict[int, _Correlation] = {}
        # Correlation ids an API->device pair links (so their correlation does not), kept
        # as long as an event of theirs can be in the window.
        self._paired_ids: dict[int, int] = {}
        self._paired_order: deque[tuple[int, int]] = deque()
        self.flows: Counter[str] = Counter()  # pair category -> flows made
        self.correlation_flows = 0  # API -> device op flows by correlation id
        self.skipped: Counter[str] = Counter()  # reason -> flow events

    # -- events ---------------------------------------------------------------------------
    def push(self, slot: Slot, key: EndKey | None = None) -> Slot | None:
        """A complete event (`key`: its pid, tid, ts) or any other item, in input order;
        returns the slot that leaves the window, if one does."""
        # Every event of the input comes here: the common case is a few dict operations.
        self._seq = seq = self._seq + 1
        if key is not None:
            slot.key = key
            by_key = self._by_key
            if key not in by_key:
                by_key[key] = slot
            if self._waiting:
                waiting = self._waiting.pop(key, None)
                for end in waiting or ():
                    end.slot = slot
                    pair = end.pair
                    self._try_pair(pair, pair.ends if end is pair.start else [end])
        corr_id = slot.corr
        if corr_id is not None:
            corr = self._correlations.get(corr_id)
            if corr is None:
                corr = self._correlations[corr_id] = _Correlation()
            if slot.role == API_CALL:
                corr.apis.append(slot)
            else:
                corr.ops.append(slot)
        slots = self._slots
        slots.append(slot)
        if len(slots) <= self.window:
            return None
        before = seq - self.window
        if (
            (self._waiting_order and self._waiting_order[0][0] <= before)
            or (self._pair_order and self._pair_order[0][0] <= before)
            or (self._paired_order and self._paired_order[0][0] <= before - self.window)
        ):
            self._expire(before)
        gone = slots.popleft()
        self._leave(gone)
        return gone

    def flow(self, phase: str, category: str, ident: Any, key: EndKey) -> None:
        """A flow event (`s` or `f`) of `category` and `ident` at `key`."""
        pk = (category, ident)
        pair = self._pairs.get(pk)
        if pair is None:
            pair = self._pairs[pk] = _Pair(category, ident)
        pair.touched = self._seq
        self._pair_order.append((self._seq, pk))
        if phase == "s" and pair.start is not None:
            self.skipped[f"'{category}' flow starts repeated under one id"] += 1
            return
        end = _End(pair, self._by_key.get(key))
        if end.slot is None:
            self._waiting.setdefault(key, []).append(end)
            self._waiting_order.append((self._seq, key))
        if phase == "s":
            pair.start = end
            new = pair.ends
        else:
            pair.ends.append(end)
            pair.n_ends += 1
            new = [end]
        if pair.start is not None and pair.n_ends:
            if category in API_TO_DEVICE_FLOWS and type(ident) is int:
                if ident not in self._paired_ids:
                    self._paired_order.append((self._seq, ident))
                self._paired_ids[ident] = self._seq
            self._try_pair(pair, new)

    def drain(self) -> list[Slot]:
        """The end of the input: every slot still in the window, in order, and the
        accounting of what never paired."""
        out = []
        while self._slots:
            slot = self._slots.popleft()
            self._leave(slot)
            out.append(slot)
        for pair in self._pairs.values():
            self._account(pair)
        self._pairs.clear()
        return out

    def held(self) -> int:
        """Entries held for links now (slots, waiting ends, pairs, correlations, paired
        ids): at most a few per event of the window, whatever the input's size."""
        return (
            len(self._slots)
            + len(self._waiting_order)
            + len(self._pair_order)
            + len(self._correlations)
            + len(self._paired_order)
        )

    # -- links ----------------------------------------------------------------------------
    def _try_pair(self, pair: _Pair, ends: list[_End]) -> None:
        """Link the pair's start to those of `ends` (not linked yet) that are bound."""
        start = pair.start
        if start is None or start.slot is None:
            return
        done = []
        for end in ends:
            if end.slot is None:
                continue
            done.append(end)
            if end.slot is start.slot:
                self.skipped[f"'{pair.category}' flow pairs from an event to itself"] += 1
            elif start.slot.gone or end.slot.gone:
                self.skipped[
                    f"'{pair.category}' flow pairs farther apart than {self.window} events"
                ] += 1
            else:
                self._n_pair_flows += 1
                fid = _FLOW_NAMESPACE | self._n_pair_flows
                start.slot.start(fid)
                end.slot.end(fid)
                self.flows[pair.category] += 1
        if done:
            if len(done) == len(pair.ends):
                pair.ends = []
            else:
                pair.ends = [end for end in pair.ends if end not in done]

    def _leave(self, slot: Slot) -> None:
        """`slot` leaves the window: the correlation links it is the first end of."""
        slot.gone = True
        key = slot.key
        if key is not None and self._by_key.get(key) is slot:
            del self._by_key[key]
        corr_id = slot.corr
        if corr_id is None:
            return
        corr = self._correlations.get(corr_id)
        if corr is None:
            return  # linked when its API call left
        if slot.role == API_CALL:
            if not corr.apis or corr.apis[0] is not slot:
                return  # a repeated correlation id, met after the entry of its first
            del corr.apis[0]  # slots leave in arrival order: this is the oldest
            if corr_id not in self._paired_ids:
                # Every op of the correlation still in the window: this call caused it.
                for op in corr.ops:
                    self._link(slot, op, corr_id, corr)
                corr.ops.clear()
        else:
            if corr.ops and corr.ops[0] is slot:
                del corr.ops[0]
                if corr.apis and corr_id not in self._paired_ids:
                    self._link(corr.apis[0], slot, corr_id, corr)
        if not corr.apis and not corr.ops:
            del self._correlations[corr_id]

    def _link(self, api: Slot, op: Slot, corr_id: int, corr: _Correlation) -> None:
        fid = model.flow_id(0, corr_id, corr.next_index)
        corr.next_index += 1
        api.start(fid)
        op.end(fid)
        self.correlation_flows += 1

    # -- bounds ---------------------------------------------------------------------------
    def _expire(self, before: int) -> None:
        """Forget what is older than the window: flow ends still waiting for their event,
        pairs waiting for their other half (counted by reason), paired correlation ids."""
        order = self._waiting_order
        while order and order[0][0] <= before:
            _, key = order.popleft()
            self._waiting.pop(key, None)
        order2 = self._pair_order
        while order2 and order2[0][0] <= before:
            seq, pk = order2.popleft()
            pair = self._pairs.get(pk)
            if pair is not None and pair.touched == seq:
                del self._pairs[pk]
                self._account(pair, f" within {self.window} events")
        # A paired id stays until the events of both ends have left (twice the window).
        order3 = self._paired_order
        while order3 and order3[0][0] <= before - self.window:
            seq, ident = order3.popleft()
            if self._paired_ids.get(ident) == seq:
                del self._paired_ids[ident]
            elif ident in self._paired_ids:
                order3.append((self._paired_ids[ident], ident))

    def _account(self, pair: _Pair, where: str = "") -> None:
        """Why a pair's flow events that made no flow did not (`where`: the other half
        was not met within the window, for a pair that waited that long); the pair is
        dropped, and its cycle with its ends broken (convert pauses the cyclic collector
        while it streams: collector/gc_pause.py)."""
        start, ends, pair.start, pair.ends = pair.start, pair.ends, None, []
        self._report(pair, start, ends, where)

    def _report(self, pair: _Pair, start: _End | None, ends: list[_End], where: str) -> None:
        category = pair.category
        if start is None:
            self.skipped[f"'{category}' flow ends without a start{where}"] += pair.n_ends
        elif not pair.n_ends:
            self.skipped[f"'{category}' flow starts without an end{where}"] += 1
        elif ends:
            self.skipped[f"'{category}' flow pairs with an end at no event"] += len(ends)
