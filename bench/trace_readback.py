"""What trace_processor reads back from a trace, as sorted rows: its slices (with their
thread or track, depth, parent and args; instants too), flows, CPU samples and launch and
wait stacks (with their frames), counters and threads.  Two traces that read back the
same differ at most in how their bytes are laid out (packet order, interned ids, clock
ids).

    .venv/bin/python bench/trace_readback.py BEFORE.perfetto-trace AFTER.perfetto-trace

exits 1 and prints the first differences if the two read back differently, and writes
the counts to bench/results/trace_readback.json (--json elsewhere)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from exporters.perfetto.engine.trace_processor import open_trace  # noqa: E402

# A slice named by what it is, never by ids the layout decides (slice ids, track ids).
_SLICE = """
select s.id, s.ts, s.dur, s.name, s.category, s.depth,
  coalesce(t.name, '') as track_name,
  coalesce(th.tid, -1) as tid, coalesce(p.pid, -1) as pid,
  coalesce(extract_arg(t.dimension_arg_set_id, 'device'), -1) as device,
  coalesce(extract_arg(t.dimension_arg_set_id, 'stream'), -1) as stream
from slice s join track t on t.id = s.track_id
left join thread_track tt on tt.id = s.track_id
left join thread th using (utid)
left join process p on p.upid = th.upid
"""
_ARGS = "select arg_set_id, flat_key, display_value from args"


def _key(row: dict) -> tuple:
    return (
        row["ts"], row["dur"], row["name"], row["category"], row["depth"],
        row["track_name"], row["tid"], row["pid"], row["device"], row["stream"],
    )  # fmt: skip


def read_back(path: Path) -> dict[str, list]:
    """Every table the comparison covers, as sorted lists of tuples."""
    with open_trace(path) as trace:
        slices = {r["id"]: r for r in trace.query(_SLICE)}
        arg_rows: dict[int, list] = {}
        for r in trace.query(_ARGS):
            arg_rows.setdefault(r["arg_set_id"], []).append((r["flat_key"], r["display_value"]))
        set_of = {r["id"]: r["arg_set_id"] for r in trace.query("select id, arg_set_id from slice")}
        parent = {r["id"]: r["parent_id"] for r in trace.query("select id, parent_id from slice")}
        out: dict[str, list] = {}
        out["slices"] = sorted(
            (
                *_key(r),
                _key(slices[parent[i]]) if parent[i] is not None else (),
                tuple(sorted(arg_rows.get(set_of[i], []), key=repr)),
            )
            for i, r in slices.items()
        )
        out["flows"] = sorted(
            (_key(slices[r["slice_out"]]), _key(slices[r["slice_in"]]))
            for r in trace.query("select slice_out, slice_in from flow")
        )
        out["samples"] = sorted(
            (r["ts"], r["tid"], r["cpu"] if r["cpu"] is not None else -1, r["frames"] or "")
            for r in trace.query(
                """select ps.ts, th.tid, ps.cpu,
                  (select group_concat(f.name, ';') from (
                     select frame_id from experimental_ancestor_stack_profile_callsite(
                       ps.callsite_id) union all
                     select frame_id from stack_profile_callsite where id = ps.callsite_id)
                   join stack_profile_frame f on f.id = frame_id) as frames
                from perf_sample ps join thread th using (utid)"""
            )
        )
        # Launch and wait stacks: StreamingProfilePackets, the ns rest in process_priority.
        out["stack_samples"] = sorted(
            (r["ts"], r["tid"], r["frames"] or "")
            for r in trace.query(
                """select p.ts + p.process_priority as ts, th.tid,
                  (select group_concat(f.name, ';') from (
                     select frame_id from experimental_ancestor_stack_profile_callsite(
                       p.callsite_id) union all
                     select frame_id from stack_profile_callsite where id = p.callsite_id)
                   join stack_profile_frame f on f.id = frame_id) as frames
                from cpu_profile_stack_sample p join thread th using (utid)"""
            )
        )
        out["counters"] = sorted(
            (r["ts"], r["value"], r["name"] or "")
            for r in trace.query(
                "select c.ts, c.value, t.name from counter c join counter_track t "
                "on t.id = c.track_id"
            )
        )
        out["threads"] = sorted(
            (r["tid"] or -1, r["pid"] or -1, r["name"] or "")
            for r in trace.query(
                "select th.tid, p.pid, th.name from thread th left join process p using (upid)"
            )
        )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    ap.add_argument("--json", type=Path, default=REPO / "bench/results/trace_readback.json")
    args = ap.parse_args()
    a, b = read_back(args.before), read_back(args.after)
    result = {
        "before": str(args.before),
        "after": str(args.after),
        "counts": {k: len(v) for k, v in a.items()},
        "same": {k: a[k] == b[k] for k in a},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))
    for k in a:
        if a[k] != b[k]:
            print(f"{k}: only before: {sorted(set(a[k]) - set(b[k]))[:3]}")
            print(f"{k}: only after: {sorted(set(b[k]) - set(a[k]))[:3]}")
    return 0 if all(result["same"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
