"""`merge --align nccl`: refine the clock offsets so that the ends of the same NCCL collective
line up across inputs.

Every rank of a communicator launches its collectives in one order, and a collective ends
on all of them at nearly the same moment (the last rank to arrive releases everyone), so the
k-th `ncclDevKernel_AllReduce...` of one stream ends with the k-th of that name on the other
ranks' streams.  Kernels are keyed (name, k) per GPU stream; an input's time for a key is
the median over its streams (a node holds several ranks, already on one clock); each input
moves by the median, over the keys it shares with the reference input (the first with NCCL
kernels), of the difference of those times.  Medians: a rank that joined late or a
collective missing on one side moves the result by nothing.

The ends are read by SQL (view xpu_nccl_kernel), one input at a time: memory is one input's
trace_processor, whatever the number of inputs.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from collector.errors import UserError

# Ends of NCCL kernels in trace_processor time (the input's BOOTTIME); a stream is its
# device track and track name (sibling lanes of a stream share both).
_ENDS_SQL = """
select k.ts + k.dur as end_ts, k.name, t.parent_id as device, t.name as stream
from xpu_nccl_kernel k join track t on k.track_id = t.id
order by device, stream, k.ts, k.id
"""

Key = tuple[str, int]  # (kernel name, occurrence on its stream)


@dataclass(frozen=True)
class Spread:
    """How far apart the ends of one collective are across all inputs' streams."""

    collectives: int  # keys present in every input with NCCL kernels
    median_ns: int | None
    max_ns: int | None


@dataclass(frozen=True)
class NcclAlignment:
    offsets: list[int]  # final offsets (ns), every input
    deltas: list[int]  # what NCCL added to the clock offsets (before making them >= 0)
    kernels: list[int]  # NCCL kernels per input
    matched: list[int]  # keys each input shares with the reference
    reference: int | None  # index of the reference input (None: no NCCL kernels)
    before: Spread
    after: Spread


def collective_ends(path: Path, shell: str | None) -> dict[Key, list[int]]:
    """(name, k) -> the end of the k-th kernel of that name on each stream of the trace."""
    # Imported here: a merge without --align nccl never loads the query engine.
    from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError, open_trace
    from exporters.perfetto.engine.views import load_views

    try:
        with open_trace(path, shell) as trace:
            load_views(trace)
            rows = trace.query(_ENDS_SQL)
    except (TraceOpenError, QueryError) as exc:
        raise UserError(f"{path}: {exc}") from None
    ends: dict[Key, list[int]] = defaultdict(list)
    seen: dict[tuple[int, str, str], int] = defaultdict(int)
    for row in rows:
        stream_key = (row["device"], row["stream"], row["name"])
        k = seen[stream_key]
        seen[stream_key] = k + 1
        ends[(row["name"], k)].append(int(row["end_ts"]))
    return dict(ends)


def _median(values: Sequence[int]) -> int:
    return int(statistics.median(values))


def spread(ends: Sequence[dict[Key, list[int]]], offsets: Sequence[int]) -> Spread:
    """Median and largest spread (last end - first end, over every stream of every input)
    of the collectives that every input with NCCL kernels has."""
    present = [e for e in ends if e]
    if len(present) < 2:
        return Spread(0, None, None)
    common = set(present[0])
    for e in present[1:]:
        common &= set(e)
    spreads = []
    for key in common:
        moved = [t + off for e, off in zip(ends, offsets, strict=True) if e for t in e[key]]
        spreads.append(max(moved) - min(moved))
    if not spreads:
        return Spread(0, None, None)
    return Spread(len(spreads), _median(spreads), max(spreads))


def refine(ends: Sequence[dict[Key, list[int]]], clock_offsets: Sequence[int]) -> NcclAlignment:
    """Offsets that line up the inputs' NCCL ends, starting from the clock offsets."""
    reference = next((i for i, e in enumerate(ends) if e), None)
    deltas = [0] * len(ends)
    matched = [0] * len(ends)
    if reference is not None:
        ref = ends[reference]
        ref_time = {key: _median(times) + clock_offsets[reference] for key, times in ref.items()}
        for i, e in enumerate(ends):
            shared = [key for key in e if key in ref_time]
            matched[i] = len(shared)
            if i == reference or not shared:
                continue
            deltas[i] = _median(
                [ref_time[key] - (_median(e[key]) + clock_offsets[i]) for key in shared]
            )
    moved = [off + d for off, d in zip(clock_offsets, deltas, strict=True)]
    least = min(moved, default=0)
    offsets = [m - least for m in moved]  # none negative: no time moves before 0
    return NcclAlignment(
        offsets=offsets,
        deltas=deltas,
        kernels=[sum(len(t) for t in e.values()) for e in ends],
        matched=matched,
        reference=reference,
        before=spread(ends, clock_offsets),
        after=spread(ends, offsets),
    )
