"""Writer and convert benchmarks: prints a table and writes bench/results/convert.json.

- writer throughput: GPU ops (kernel slice + correlation/device/stream/grid args + flow)
  per second through the one encoder, on one core; bytes per kernel in the file;
- the same with the API slice that launched each kernel (what `record` writes);
- convert: size ratio vs the input JSON and vs its .json.gz, speed in MB/s of JSON.
Each number is the median of --rounds runs.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collector import model  # noqa: E402
from collector.sources import kineto  # noqa: E402
from exporters.perfetto.writer import TraceWriter  # noqa: E402

KERNEL_ARGS = {"grid_x": 128, "block_x": 256, "registers_per_thread": 32}
NAMES = [f"void kernel_{i}<float, 128>(float const*, float*, int)" for i in range(50)]


def make_ops(n: int, with_api: bool) -> list[model.Event]:
    events: list[model.Event] = []
    ts = 1_000_000_000
    for corr in range(1, n + 1):
        fid = model.flow_id(1234, corr)
        if with_api:
            events.append(
                model.CpuSlice(
                    1234,
                    1234,
                    ts,
                    2_500,
                    "cudaLaunchKernel",
                    model.CAT_CUDA_API,
                    {"correlation_id": corr},
                    flow_ids=(fid,),
                )
            )
        events.append(
            model.GpuOp(
                0,
                7,
                ts + 4_000,
                3_000 + corr % 97,
                NAMES[corr % len(NAMES)],
                model.CAT_KERNEL,
                KERNEL_ARGS,
                correlation_id=corr,
                terminating_flow_ids=(fid,),
            )
        )
        ts += 3_100
    return events


def bench_writer(n: int, with_api: bool, rounds: int) -> dict[str, float]:
    events = make_ops(n, with_api)
    rates, sizes = [], []
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.perfetto-trace"
        for _ in range(rounds):
            t0 = time.perf_counter()
            with TraceWriter(path) as w:
                w.producer("bench").write_all(events)
            rates.append(n / (time.perf_counter() - t0))
            sizes.append(path.stat().st_size / n)
    return {"ops_per_s": statistics.median(rates), "bytes_per_kernel": statistics.median(sizes)}


def bench_convert(src: Path, rounds: int) -> dict[str, float]:
    if kineto.is_gzip(src):
        with gzip.open(src) as f:
            raw = len(f.read())
    else:
        raw = src.stat().st_size
    gz = src.stat().st_size
    times, out_size = [], 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.perfetto-trace"
        for _ in range(rounds):
            t0 = time.perf_counter()
            stats = kineto.ConvertStats()
            links = kineto.scan_links(src)
            with TraceWriter(out) as w:
                w.producer("kineto").write_all(kineto.convert_events(src, links, stats))
            times.append(time.perf_counter() - t0)
            out_size = out.stat().st_size
    t = statistics.median(times)
    return {
        "json_bytes": raw,
        "gz_bytes": gz,
        "out_bytes": out_size,
        "ratio_vs_json": raw / out_size,
        "ratio_vs_gz": gz / out_size,
        "mb_per_s": raw / 1e6 / t,
        "seconds": t,
        "kernels": stats.kernels,
        "out_bytes_per_kernel": out_size / max(stats.kernels, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/convert.json")
    args = ap.parse_args()
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # "on one core"
    result: dict[str, object] = {
        "writer_kernels_only": bench_writer(args.ops, False, args.rounds),
        "writer_kernel_plus_api": bench_writer(args.ops, True, args.rounds),
        "convert": {
            p.name: bench_convert(p, args.rounds)
            for p in sorted((REPO / "bench/data").glob("kineto_*.json.gz"))
        },
        "rounds": args.rounds,
        "python": sys.version.split()[0],
    }
    print(f"{'writer':<28}{'ops/s':>12}{'B/kernel':>10}")
    for key in ("writer_kernels_only", "writer_kernel_plus_api"):
        r = result[key]  # type: ignore[index]
        print(f"{key:<28}{r['ops_per_s']:>12,.0f}{r['bytes_per_kernel']:>10.1f}")
    print(f"\n{'convert input':<34}{'JSON MB':>8}{'x JSON':>8}{'x gz':>7}{'MB/s':>7}{'B/kern':>8}")
    for name, r in result["convert"].items():  # type: ignore[union-attr]
        print(
            f"{name:<34}{r['json_bytes'] / 1e6:>8.2f}{r['ratio_vs_json']:>8.1f}"
            f"{r['ratio_vs_gz']:>7.2f}{r['mb_per_s']:>7.1f}{r['out_bytes_per_kernel']:>8.0f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
