"""Big Kineto traces made from real ones, for bench/scale.py.

Outside traces (tests/data/kineto_outside: MTIA inference, CUDA AlexNet with syncs and
copies, a CUDA trace with profiler ranges; its README says where they come from) are written
one after the other as one "round", and rounds repeat until the trace holds the asked number
of complete events.  Each copy is moved so nothing collides: times shifted past the previous
copy's end (each source starts at the round's start); the ids Kineto links events by
(correlation and flow ids, which are the same numbers; External id, Record function id, Ev
Idx) renumbered densely per copy (the MTIA trace's correlations reach 1e9: shifted, 290
copies would pass the 32 bits of a correlation id); pids/tids kept (a copy is the same
processes running on).  Process and thread names (`M` events) are written once.  The text
is JSON as Kineto writes it: one event per line, the first source's top-level metadata.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SOURCES = [
    REPO / "tests/data/kineto_outside" / name
    for name in (
        "mtia_inference_rank_0.json.gz",
        "cuda_alexnet_context_sync.json.gz",
        "cuda_profiler_range.json.gz",
    )
]
# id arg -> the numbering it shares (flow ids of ac2g pairs are correlation ids)
_ID_KINDS = {
    "correlation": "link",
    "External id": "external",
    "Record function id": "record",
    "Ev Idx": "index",
}
_GAP_US = 1000  # between two copies of a source
_BASE_US = 10**12  # where every source's first event goes (float times stay exact to 1 ns)


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") as f:
        return json.load(f)


def _span(events: list[dict[str, Any]]) -> tuple[float, float]:
    timed = [e for e in events if e.get("ph") in ("X", "i", "s", "f") and "ts" in e]
    # The MTIA trace's few events at ts 0 would stretch its span over 8 days.
    start = min(e["ts"] for e in timed if e["ts"] > 0)
    end = max(e["ts"] + e.get("dur", 0) for e in timed)
    return start, end


def _ids(events: list[dict[str, Any]]) -> dict[str, dict[int, int]]:
    """Per numbering, each id the source uses -> its dense index."""
    seen: dict[str, set[int]] = {kind: set() for kind in _ID_KINDS.values()}
    for ev in events:
        if ev.get("ph") in ("s", "f") and isinstance(ev.get("id"), int):
            seen["link"].add(ev["id"])
        args = ev.get("args")
        if isinstance(args, dict):
            for key, kind in _ID_KINDS.items():
                value = args.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    seen[kind].add(value)
    return {kind: {v: i for i, v in enumerate(sorted(values))} for kind, values in seen.items()}


class _Renumber:
    """New ids for copy `copy` of source `source`: 1 + the ids of all earlier copies and
    sources + the id's dense index."""

    def __init__(self, tables: list[dict[str, dict[int, int]]]) -> None:
        self.tables = tables
        kinds = tables[0].keys()
        self.per_round = {k: sum(len(t[k]) for t in tables) for k in kinds}
        self.before = [
            {k: sum(len(t[k]) for t in tables[:i]) for k in kinds} for i in range(len(tables))
        ]

    def new(self, kind: str, value: int, source: int, copy: int) -> int:
        index = self.tables[source][kind][value]
        return 1 + copy * self.per_round[kind] + self.before[source][kind] + index


def _moved(
    ev: dict[str, Any], shift: float, ids: _Renumber, source: int, copy: int
) -> dict[str, Any]:
    out = dict(ev)
    if "ts" in out and out["ts"] > 0:
        out["ts"] = out["ts"] + shift
    if out.get("ph") in ("s", "f") and isinstance(out.get("id"), int):
        out["id"] = ids.new("link", out["id"], source, copy)
    args = out.get("args")
    if isinstance(args, dict):
        args = dict(args)
        for key, kind in _ID_KINDS.items():
            value = args.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                args[key] = ids.new(kind, value, source, copy)
        out["args"] = args
    return out


def complete_events(sources: list[Path] = SOURCES) -> int:
    """Complete (`X`) events in one round."""
    return sum(sum(e.get("ph") == "X" for e in _load(p)["traceEvents"]) for p in sources)


def build(out: Path, slices: int, sources: list[Path] = SOURCES) -> int:
    """Write a Kineto trace of at least `slices` complete events; returns how many."""
    traces = [_load(p) for p in sources]
    spans = [_span(t["traceEvents"]) for t in traces]
    ids = _Renumber([_ids(t["traceEvents"]) for t in traces])
    round_us = max(end - start for start, end in spans) + _GAP_US
    head = {k: v for k, v in traces[0].items() if k != "traceEvents"}
    written = 0
    copy = 0
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w") as f:
        f.write(json.dumps(head)[:-1] + ', "traceEvents": [\n')
        first = True
        while written < slices:
            for n, (trace, (start, _)) in enumerate(zip(traces, spans, strict=True)):
                shift = _BASE_US - start + copy * round_us
                for ev in trace["traceEvents"]:
                    if ev.get("ph") == "M" and copy:
                        continue
                    if not first:
                        f.write(",\n")
                    first = False
                    f.write(json.dumps(_moved(ev, shift, ids, n, copy)))
                    written += ev.get("ph") == "X"
            copy += 1
        f.write("\n]}\n")
    tmp.replace(out)
    return written
