"""What `record` spends after the target exits: the CUPTI streams through the source and the
writer into a trace, for the current tree and a baseline git revision, on one core.

    .venv/bin/python bench/record_write_bench.py --baseline-rev REV [--rounds 5]

Inputs: real streams kept by `record --keep-streams` on the lent H100
(bench/data/cupti_streams/: 50 steps of the launch-bound and CUDA-graph workloads).  Each
(tree, stream) runs in a fresh process pinned to one core, trees interleaved round by round;
the time counted is from opening the trace to closing it (reading the stream, symbolizing
launch stacks, encoding, deflating).  Prints a table and writes
bench/results/record_write.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
STREAMS = REPO / "bench/data/cupti_streams"

# Runs in the tree under test (cwd and PYTHONPATH), prints one JSON line.
_CHILD = """
import json, os, sys, time
os.sched_setaffinity(0, {int(sys.argv[3])})
from pathlib import Path
from collector.sources.cupti import CuptiSource
from exporters.perfetto.writer import TraceWriter
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
stream, out = Path(sys.argv[1]), Path(sys.argv[2])
t0, c0 = time.perf_counter(), time.process_time()
source = CuptiSource(stream)
with TraceWriter(out, clock_id=pb.BUILTIN_CLOCK_MONOTONIC) as w:
    w.producer("cupti").write_all(source.events())
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu_seconds": time.process_time() - c0,
                  "kernels": source.counts["records_kernel"], "api": source.counts["records_api"],
                  "gpu_ops": source.counts["gpu_ops"], "bytes": out.stat().st_size}))
"""


def extract(rev: str, into: Path) -> Path:
    """The tree of git revision `rev` under `into`."""
    data = subprocess.run(
        ["git", "-C", str(REPO), "archive", rev], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return into


def run_once(tree: Path, stream_dir: Path, out: Path, core: int) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD, str(stream_dir), str(out), str(core)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--baseline-rev", required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/record_write.json")
    args = ap.parse_args()
    core = sorted(os.sched_getaffinity(0))[0]
    result: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"current": REPO, "baseline": extract(args.baseline_rev, Path(tmp) / "base")}
        for stream in sorted(STREAMS.glob("*.xpstream")):
            # CuptiSource reads a directory of streams: one directory per input.
            one = Path(tmp) / stream.stem
            one.mkdir()
            (one / f"cupti-1-{stream.stem}.xpstream").symlink_to(stream)
            runs: dict[str, list[dict]] = {label: [] for label in trees}
            for r in range(args.rounds):
                for label in list(trees) if r % 2 == 0 else list(trees)[::-1]:
                    out = Path(tmp) / f"{label}.perfetto-trace"
                    runs[label].append(run_once(trees[label], one, out, core))
            cur, base = runs["current"], runs["baseline"]
            med = {label: statistics.median(x["seconds"] for x in rs) for label, rs in runs.items()}
            result[stream.stem] = {
                "kernels": cur[0]["kernels"],
                "api_calls": cur[0]["api"],
                "gpu_ops": cur[0]["gpu_ops"],
                "seconds": med["current"],
                "baseline_seconds": med["baseline"],
                "speedup": statistics.median(
                    b["seconds"] / c["seconds"] for c, b in zip(cur, base, strict=True)
                ),
                "gpu_ops_per_s": cur[0]["gpu_ops"] / med["current"],
                "baseline_gpu_ops_per_s": cur[0]["gpu_ops"] / med["baseline"],
                "trace_bytes": cur[0]["bytes"],
                "baseline_trace_bytes": base[0]["bytes"],
                "seconds_rounds": [x["seconds"] for x in cur],
                "baseline_seconds_rounds": [x["seconds"] for x in base],
            }
    print(
        f"{'stream':<16}{'GPU ops':>9}{'API':>8}{'s':>8}{'base s':>8}{'speedup':>9}"
        f"{'ops/s':>10}{'base ops/s':>12}{'bytes':>10}{'base bytes':>11}"
    )
    for name, r in result.items():
        print(
            f"{name:<16}{r['gpu_ops']:>9}{r['api_calls']:>8}{r['seconds']:>8.2f}"
            f"{r['baseline_seconds']:>8.2f}{r['speedup']:>8.2f}x{r['gpu_ops_per_s']:>10,.0f}"
            f"{r['baseline_gpu_ops_per_s']:>12,.0f}{r['trace_bytes']:>10}{r['baseline_trace_bytes']:>11}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps({"baseline_rev": args.baseline_rev, "rounds": args.rounds, **result}, indent=1)
        + "\n"
    )
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
