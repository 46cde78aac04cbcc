"""Which slices are the steps, before steps.sql runs: `ProfilerStep#*` where the trace has
them, `--steps NAME` where asked (an error where it matches nothing), else a range that
repeats on the launching process (an NVTX range, a record_function, a Python function the
trace marks), else none (steps.sql then uses repeated CUDA graph launches, else the launch
sequence).

A repeating range: slices of one name (a trailing number dropped: `iter 12`, `step#3`) on
the threads of the process that launches most, at least MIN_STEPS of them, that do not
overlap one another, cover at least RANGE_SPAN of their own stretch (first start to last
end: a long set-up or warm-up before them, as in a short program, does not count) and
hold at least
RANGE_LAUNCHES of the process's launches and RANGE_TILES of those between the first and the
last (steps tile their stretch), nearly all of them (RANGE_WITH_LAUNCH) holding a launch:
a step's forward, backward and update inside, set-up and warm-up outside.  Of
several such names, the one holding most launches is the step, then the one with fewer
slices (the larger unit: a step over its micro-batches)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporters.perfetto.engine.trace_processor import Trace, sql_literal

DEFAULT_STEPS = "ProfilerStep#*"
MIN_STEPS = 3
RANGE_SPAN = 0.5
RANGE_LAUNCHES = 0.5
RANGE_WITH_LAUNCH = 0.8
RANGE_TILES = 0.9

# Thread slices that are never a step: API calls, waits, the recorder's metadata.
_NOT_RANGES = ("cuda_api", "wait", "xpu_perf_metadata")
_NUMBERED = re.compile(r"[\s#_:.-]*\d+$")


class StepsError(ValueError):
    """--steps names slices the trace does not have."""


@dataclass(frozen=True)
class StepChoice:
    glob: str  # what steps.sql marks steps with ('' for none: detect)
    how: str  # what the output says: "slices named 'X'", "repeating range 'X'"


def family(name: str) -> str:
    """The name without its trailing number (`ProfilerStep#12` -> `ProfilerStep`)."""
    return _NUMBERED.sub("", name) or name


def glob_escape(text: str) -> str:
    return re.sub(r"([\[\]*?])", r"[\1]", text)


def _count(trace: Trace, glob: str) -> int:
    return int(
        trace.scalar(
            f"select count(*) from xpu_thread_slice where name glob {sql_literal(glob)} and dur > 0"
        )
        or 0
    )


def choose(trace: Trace, asked: str | None) -> StepChoice:
    """The step slices for steps.sql (span.sql loaded)."""
    if asked:
        if not _count(trace, asked):
            raise StepsError(
                f"--steps {asked!r}: no slice of that name or pattern in the trace; "
                "leave --steps out to use a repeating range or the launch sequence"
            )
        return StepChoice(asked, f"slices named {asked!r}")
    if _count(trace, DEFAULT_STEPS):
        return StepChoice(DEFAULT_STEPS, f"slices named {DEFAULT_STEPS!r}")
    found = repeating_range(trace)
    if found is None:
        return StepChoice("", "")
    return StepChoice(found[0], f"repeating range {found[1]!r}")


def repeating_range(trace: Trace) -> tuple[str, str] | None:
    """(glob, name) of the range that repeats on the launching process, or None."""
    import numpy as np

    main = trace.query(
        "select t.upid from xpu_analysis_op o join thread t using (utid) "
        "where o.api_ts is not null group by t.upid order by count(*) desc limit 1"
    )
    if not main or main[0]["upid"] is None:
        return None
    upid = int(main[0]["upid"])
    # The slice table filtered by its tracks (not the xpu_thread_slice view joined to the
    # threads, several times slower).
    tracks = f"select tt.id from thread_track tt join thread t using (utid) where t.upid = {upid}"
    # (The categories left out in Python: a condition per row costs more than the rows.)
    names = [
        r
        for r in trace.query(
            "select s.name, s.category, count(*) as n, sum(s.dur) as d, min(s.ts) as lo, "
            "max(s.ts + s.dur) as hi from slice s "
            f"where s.track_id in ({tracks}) and s.dur > 0 group by s.name, s.category"
        )
        if r["category"] not in _NOT_RANGES
    ]
    families: dict[str, list[str]] = {}
    sizes: dict[str, list[int]] = {}  # family -> [slices, their time, first start, last end]
    for r in names:
        key = family(str(r["name"]))
        families.setdefault(key, []).append(str(r["name"]))
        size = sizes.setdefault(key, [0, 0, int(r["lo"]), int(r["hi"])])
        size[0] += int(r["n"])
        size[1] += int(r["d"])
        size[2] = min(size[2], int(r["lo"]))
        size[3] = max(size[3], int(r["hi"]))
    candidates = [
        k
        for k, (n, d, lo, hi) in sizes.items()
        if n >= MIN_STEPS and d >= RANGE_SPAN * max(1, hi - lo)
    ]
    if not candidates:
        return None
    launches = np.sort(
        np.asarray(
            trace.query_arrays(
                "select distinct o.api_ts from xpu_analysis_op o join thread t using (utid) "
                f"where o.api_ts is not null and t.upid = {upid}"
            )["api_ts"],
            np.int64,
        )
    )
    best: tuple[int, int, str, str] | None = None
    for key in candidates:
        members = families[key]
        glob = glob_escape(key) + "*" if members != [key] else glob_escape(key)
        listed = ",".join(sql_literal(m) for m in members)
        cols = trace.query_arrays(
            "select s.ts, s.ts + s.dur as end_ts from slice s "
            f"where s.track_id in ({tracks}) and s.dur > 0 "
            f"and s.name in ({listed}) order by s.ts"
        )
        start = np.asarray(cols["ts"], np.int64)
        end = np.asarray(cols["end_ts"], np.int64)
        if len(start) < MIN_STEPS or (start[1:] < end[:-1]).any():
            continue  # nested or overlapping: not a sequence of steps
        held = np.searchsorted(launches, end, side="right") - np.searchsorted(
            launches, start, side="left"
        )
        inside = int(held.sum())
        if inside < RANGE_LAUNCHES * len(launches) or (held > 0).mean() < RANGE_WITH_LAUNCH:
            continue
        # Steps tile their stretch: nearly every launch between the first and the last holds
        # is inside one (a `backward` range leaves the forward's and optimizer's out).
        within = int(
            np.searchsorted(launches, end[-1], side="right")
            - np.searchsorted(launches, start[0], side="left")
        )
        if inside < RANGE_TILES * within:
            continue
        rank = (inside, -len(start), glob, key)
        if best is None or rank[:2] > best[:2]:
            best = rank
    return None if best is None else (best[2], best[3])
