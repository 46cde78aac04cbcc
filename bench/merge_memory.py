"""Memory of `merge` and of a batch-query worker against the number of traces.

    .venv/bin/python bench/merge_memory.py [--counts 1 10 25 50 100] [--steps 500]

Inputs: 100 rank traces in `record`'s form written by the real writer
(tests/rank_traces.py: per step 3 compute + 3 NCCL kernels with their API calls, launch
stacks and flows, a CPU sample; the same pid on every rank, a host each).  For each count N,
in fresh processes: `merge` of the first N (peak RSS of the merging process, wall time, output
size), and `xpu-perf query` of the same N traces on a local pool of 2 workers (peak RSS of the
largest worker).  Both should stay flat in N: merge streams packets (one chunk at a time), a
worker holds one trace at a time.  Prints a table and writes bench/results/merge_memory.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# Each measurement runs in a child of its own: ru_maxrss is the peak of that process (merge)
# or of its largest waited-for child (the pool's workers).
_MERGE = """
import resource, sys, time
from pathlib import Path
from collector.merge.traces import merge_traces
paths = [Path(p) for p in sys.argv[2:]]
t0 = time.perf_counter()
report = merge_traces(paths, Path(sys.argv[1]))
print(time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      report.total("slices"))
"""
_QUERY = """
import resource, sys
from collector import batch_query
rows = 0
for res in batch_query.run(sys.argv[1:], "select count(*) as n from xpu_gpu_op", jobs=2):
    assert res.error is None, res.error
    rows += res.rows[0][0]
# One trace runs in this process (no pool): its own peak is the worker's.
children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(children if len(sys.argv) > 2 else own, own, rows)
"""


def _inputs(work: Path, count: int, steps: int) -> list[Path]:
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from tests.rank_traces import RankSpec, recorded_rank_trace

    paths = []
    for rank in range(count):
        snapshot = {
            pb.BUILTIN_CLOCK_BOOTTIME: 10_000_000_000 + rank * 1_000_000,
            pb.BUILTIN_CLOCK_MONOTONIC: 10_000_000_000 + rank * 1_000_000,
            pb.BUILTIN_CLOCK_REALTIME: 1_780_000_000_000_000_000 + rank * 1_003_000,
        }
        spec = RankSpec(rank, world_size=count, host=f"node{rank // 8}", steps=steps)
        paths.append(recorded_rank_trace(work / f"rank{rank:03d}.perfetto-trace", spec, snapshot))
    return paths


def _child(code: str, *args: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return out.split()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--counts", type=int, nargs="+", default=[1, 10, 25, 50, 100])
    ap.add_argument("--steps", type=int, default=500)
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        t0 = time.perf_counter()
        inputs = _inputs(work, max(args.counts), args.steps)
        made = time.perf_counter() - t0
        size = sum(p.stat().st_size for p in inputs) / len(inputs)
        print(f"{len(inputs)} inputs of {size / 1e6:.2f} MB each (written in {made:.1f} s)")
        print(
            f"{'traces':>6} {'merge s':>8} {'merge RSS MB':>13} {'out MB':>8} "
            f"{'slices':>9} {'worker RSS MB':>14}"
        )
        for n in args.counts:
            out = work / f"merged{n}.perfetto-trace"
            names = [str(p) for p in inputs[:n]]
            seconds, merge_kb, slices = _child(_MERGE, str(out), *names)
            worker_kb, driver_kb, ops = _child(_QUERY, *names)
            row = {
                "traces": n,
                "merge_seconds": round(float(seconds), 2),
                "merge_peak_rss_mb": round(int(merge_kb) / 1024, 1),
                "merged_mb": round(out.stat().st_size / 1e6, 2),
                "merged_slices": int(slices),
                "query_worker_peak_rss_mb": round(int(worker_kb) / 1024, 1),
                "query_driver_peak_rss_mb": round(int(driver_kb) / 1024, 1),
                "query_gpu_ops": int(ops),
            }
            rows.append(row)
            out.unlink()
            print(
                f"{n:>6} {row['merge_seconds']:>8} {row['merge_peak_rss_mb']:>13} "
                f"{row['merged_mb']:>8} {row['merged_slices']:>9} "
                f"{row['query_worker_peak_rss_mb']:>14}"
            )
    result = {
        "what": "peak RSS of merge and of a batch-query worker against the number of traces",
        "input_trace_mb": round(size / 1e6, 3),
        "steps_per_trace": args.steps,
        "machine": f"{platform.machine()}, {platform.python_version()}",
        "rows": rows,
    }
    path = REPO / "bench/results/merge_memory.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
