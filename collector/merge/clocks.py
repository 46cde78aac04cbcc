"""Clock alignment by wall clock: each input's offset from its clock snapshot.

A trace written by `record` has a snapshot of BOOTTIME, MONOTONIC and REALTIME read back to
back, so REALTIME - BOOTTIME is the wall-clock time of the input's BOOTTIME 0 (its
`realtime_at_zero`).  Moving every input by the difference of that value from the smallest
one puts all inputs on one wall clock, as exact as the nodes' clocks agree (NTP/PTP: from
tens of microseconds to milliseconds; `--align nccl` refines).  Offsets are never negative:
the input with the smallest value keeps its times.

Inputs without REALTIME (converted Kineto traces) are placed by their own timestamps where
those are wall-clock times (Kineto writes them so when its clock is the system clock), and
otherwise keep their times (offset 0); the summary and the metadata say which.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.perfetto.packet_reader import TraceHead

BOOTTIME = pb.BUILTIN_CLOCK_BOOTTIME
REALTIME = pb.BUILTIN_CLOCK_REALTIME
# Timestamps above this (2001-09-09 in ns since the epoch) are wall-clock times: no
# machine's boot or monotonic clock reads 31 years.
WALL_CLOCK_MIN_NS = 10**18

ALIGN_MODES = ("clock", "nccl", "none")


@dataclass(frozen=True)
class ClockBasis:
    # "realtime": from the snapshot; "wall_clock_timestamps": the trace's times are wall
    # clock; "none": nothing relates the trace to a wall clock.
    source: str
    realtime_at_zero: int | None  # wall-clock ns at the input's BOOTTIME 0


def to_boottime(head: TraceHead, clock: int, ts: int) -> int | None:
    """`ts` of `clock` read in the trace's BOOTTIME through its snapshot."""
    snap = head.clock_snapshot
    if clock == BOOTTIME:
        return ts
    if clock in snap and BOOTTIME in snap:
        return ts - snap[clock] + snap[BOOTTIME]
    return None


def clock_basis(head: TraceHead) -> ClockBasis:
    snap = head.clock_snapshot
    if REALTIME in snap and BOOTTIME in snap:
        return ClockBasis("realtime", snap[REALTIME] - snap[BOOTTIME])
    first = (
        to_boottime(head, head.metadata_clock, head.metadata_ts)
        if head.metadata_ts is not None and head.metadata_clock is not None
        else None
    )
    if first is not None and first >= WALL_CLOCK_MIN_NS:
        return ClockBasis("wall_clock_timestamps", 0)
    return ClockBasis("none", None)


def clock_offsets(bases: list[ClockBasis], align: str) -> list[int]:
    """Per input, ns added to its BOOTTIME times (see the module doc)."""
    known = [b.realtime_at_zero for b in bases if b.realtime_at_zero is not None]
    if align == "none" or not known:
        return [0] * len(bases)
    least = min(known)
    return [0 if b.realtime_at_zero is None else b.realtime_at_zero - least for b in bases]


def least_offset(head: TraceHead) -> int:
    """The smallest offset that keeps the input's times at or after 0 in BOOTTIME: `record`
    reads BOOTTIME before MONOTONIC, so without a suspend its MONOTONIC 0 (the zero of
    every incremental clock) reads a few microseconds before BOOTTIME 0."""
    snap = head.clock_snapshot
    if BOOTTIME not in snap:
        return 0
    return max([0] + [snap[c] - snap[BOOTTIME] for c in snap if c not in (BOOTTIME, REALTIME)])


def lift(offsets: list[int], heads: list[TraceHead]) -> list[int]:
    """`offsets` moved together (the alignment unchanged) until every input's is at least
    its least_offset()."""
    lift_by = max([0] + [least_offset(h) - off for h, off in zip(heads, offsets, strict=True)])
    return [off + lift_by for off in offsets]
