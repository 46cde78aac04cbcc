"""Print the process and thread names of traces as the Perfetto UI reads them (the process
and thread tables), with each thread's CPU samples, and check the names a trace must have.

    python3 bench/names_report.py TRACE [--expect NAME_PART ...]

Exit status 1 when a process or thread name containing an --expect part is missing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from exporters.perfetto.engine.trace_processor import open_trace  # noqa: E402

NAMES_SQL = """
select p.pid, p.name as process, t.tid, t.name as thread,
  (select count(*) from perf_sample s where s.utid = t.utid) as samples
from thread t join process p using (upid)
where p.pid != 0
order by p.pid, t.tid
"""


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("trace", type=Path)
    parser.add_argument("--expect", action="append", default=[], metavar="NAME_PART")
    args = parser.parse_args()
    with open_trace(args.trace) as tp:
        rows = list(tp.query(NAMES_SQL))
    print(f"{args.trace.name}: {len(rows)} threads")
    print(f"{'pid':>8} {'process':<40} {'tid':>8} {'thread':<32} samples")
    for r in rows:
        print(
            f"{r['pid']:>8} {r['process'] or '':<40} {r['tid']:>8} {r['thread'] or '':<32} "
            f"{r['samples']}"
        )
    names = {r["process"] or "" for r in rows} | {r["thread"] or "" for r in rows}
    missing = [part for part in args.expect if not any(part in n for n in names)]
    for part in args.expect:
        print(f"{'MISSING' if part in missing else 'ok'}: a name with {part!r}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
