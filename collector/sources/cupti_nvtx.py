"""NVTX of a CUPTI stream: the MARKER table's ranges as CPU rows (they nest with the API calls
on their thread) and its marks as instants, each with its domain when not the default one."""

from __future__ import annotations

from collections import Counter

import numpy as np

from collector import model
from collector.sources.cupti_rows import CpuRows
from collector.sources.cupti_stream import Stream

# The MARKER row's flags (CUPTI's CUpti_ActivityFlag for markers).
MARKER_INSTANT, MARKER_START, MARKER_END = 1, 2, 4


def nvtx_rows(
    stream: Stream, strings: dict[int, str], pid: int, cpu: CpuRows, counts: Counter[str]
) -> list[model.Instant]:
    """NVTX: ranges become CPU rows (added to `cpu`), marks become instants (returned)."""
    t = stream.table("MARKER")
    if not t.rows:
        return []
    counts["records_marker"] += t.rows
    open_ranges: dict[int, tuple[int, int, str, str]] = {}
    instants = []
    ranges: list[tuple[int, int, int, str, str]] = []
    c = t.columns
    for i in range(t.rows):
        flags, mid, ts, tid = c["flags"][i], c["marker_id"][i], c["timestamp"][i], c["tid"][i]
        name = strings.get(c["name_id"][i], "")
        domain = strings.get(c["domain_id"][i], "")
        if flags & MARKER_INSTANT:
            instants.append(
                model.Instant(pid, tid, ts, name, "nvtx", {"domain": domain} if domain else {})
            )
        elif flags & MARKER_START:
            open_ranges[mid] = (ts, tid, name, domain)
        elif flags & MARKER_END and mid in open_ranges:
            start, stid, sname, sdomain = open_ranges.pop(mid)
            ranges.append((start, max(0, ts - start), stid, sname, sdomain))
    if ranges:
        cpu.add(
            ts=np.array([r[0] for r in ranges], np.int64),
            dur=np.array([r[1] for r in ranges], np.int64),
            track=np.array([r[2] for r in ranges], np.int64),
            name=cpu.names.index_of([r[3] for r in ranges]),
            category=cpu.categories.index_of(["nvtx"])[0],
            args=cpu.arg_sets.index_of([(("domain", r[4]),) if r[4] else () for r in ranges]),
            correlation_id=model.NONE,
            stack=model.NONE,
        )
    return instants
