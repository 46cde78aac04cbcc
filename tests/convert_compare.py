"""What trace_processor reads back from `convert` (the columnar conversion,
collector/sources/kineto_columns.py) and from the object path it replaced
(tests/kineto_reference.py, kept as the reference the columns are checked against) of the
same Kineto input, compared part by part.

    python -m tests.convert_compare INPUT.json[.gz] [--work DIR]

Parts: slices by (name, category, track: a GPU stream, or the thread), the args of every
slice (by its ts, dur, name, category and track), flows (by their two slices), thread and
process names, track names, error stats; and apart, the slices on a sibling lane of their
thread (which depends on the order a path meets overlapping slices in).  Prints per part
"same" or the first differences.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from tests.slice_batches import batched

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector import cli
from collector.sources import kineto
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import DEFAULT_COMPRESSION_LEVEL, TraceWriter
from tests.kineto_reference import convert_events

SLICES = """
select s.id, s.ts, s.dur, s.name, coalesce(s.category, '') as category,
  coalesce(tr.name, '') as track_name, coalesce(th.tid, -1) as tid,
  coalesce(p.pid, -1) as pid,
  (select group_concat(a.key || '=' || coalesce(a.int_value, a.string_value, a.real_value), ',')
     from (select * from args a where a.arg_set_id = s.arg_set_id order by a.key) a) as args
from slice s join track tr on tr.id = s.track_id
left join thread_track tt on tt.id = s.track_id
left join thread th using (utid)
left join process p using (upid)
where s.category is not 'xpu_perf_metadata'
"""


def fingerprint(path: Path) -> dict[str, Any]:
    """The parts of a trace that both conversions must agree on."""
    with open_trace(path) as t:
        slices = t.query(SLICES)
        # A thread's slice by its thread, not its lane: the two paths put a slice that
        # overlaps another on a sibling lane when their windows meet it out of order,
        # which depends on the window (lanes are compared apart, "thread lanes").
        sig = {
            r["id"]: (
                r["ts"],
                r["dur"],
                r["name"],
                r["category"],
                r["track_name"] if r["tid"] == -1 else "",
                r["tid"],
            )
            for r in slices
        }
        flows = Counter(
            (sig[r["slice_out"]], sig[r["slice_in"]])
            for r in t.query("select slice_out, slice_in from flow")
        )
        threads = Counter(
            (r["pid"], r["tid"], r["name"])
            for r in t.query(
                "select coalesce(p.pid, -1) pid, t.tid, coalesce(t.name, '') name "
                "from thread t left join process p using (upid)"
            )
        )
        processes = Counter(
            (r["pid"], r["name"])
            for r in t.query("select pid, coalesce(name, '') name from process")
        )
        tracks = Counter(r["name"] for r in t.query("select coalesce(name, '') name from track"))
        errors = t.query(
            "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
        )
        instants = t.scalar("select count(*) from slice where dur = 0")
    return {
        "slices by name, category, track": Counter(
            (
                r["name"],
                r["category"],
                r["track_name"] if r["tid"] == -1 else "",
                r["pid"],
                r["tid"],
            )
            for r in slices
        ),
        "slices on a sibling lane of their thread": Counter(
            (r["name"], r["pid"], r["tid"]) for r in slices if r["tid"] != -1 and r["track_name"]
        ),
        "slice args": Counter((*sig[r["id"]], r["args"] or "") for r in slices),
        "flows": flows,
        "threads": threads,
        "processes": processes,
        "tracks": tracks,
        "errors": Counter(map(str, errors)),
        "instants": Counter([instants]),
    }


def write_objects(src: Path, out: Path) -> None:
    """`src` converted by the object path, as convert wrote it before the columns."""
    stats = kineto.ConvertStats()
    head = kineto.read_head(src)
    with TraceWriter(out, compression_level=DEFAULT_COMPRESSION_LEVEL) as writer:
        writer.producer("kineto").write_all(batched(convert_events(src, head, stats)))
        if head.host is not None:
            writer.set_metadata("host", head.host)


def compare(src: Path, work: Path) -> dict[str, tuple[int, int, list[Any], list[Any]]]:
    """Per part: (items in the object path's, in convert's, some only in the first, some
    only in the second)."""
    objects, columns = work / "objects.perfetto-trace", work / "columns.perfetto-trace"
    write_objects(src, objects)
    assert cli.main(["convert", str(src), "-o", str(columns), "-q", "--no-progress"]) == 0
    want, got = fingerprint(objects), fingerprint(columns)
    out = {}
    for part in want:
        only_want = want[part] - got[part]
        only_got = got[part] - want[part]
        out[part] = (
            sum(want[part].values()),
            sum(got[part].values()),
            sorted(only_want.items(), key=str)[:5],
            sorted(only_got.items(), key=str)[:5],
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", type=Path, nargs="+")
    ap.add_argument("--work", type=Path)
    args = ap.parse_args()
    for src in args.inputs:
        work = args.work or Path(tempfile.mkdtemp(prefix="convert_compare_"))
        print(f"== {src}")
        for part, (n_want, n_got, only_want, only_got) in compare(src, work).items():
            if not only_want and not only_got:
                print(f"  {part}: same ({n_want})")
                continue
            print(f"  {part}: DIFFER: objects {n_want}, columns {n_got}")
            for item in only_want:
                print(f"    only objects: {item}")
            for item in only_got:
                print(f"    only columns: {item}")


if __name__ == "__main__":
    main()
