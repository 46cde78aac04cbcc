"""Writer and convert benchmarks: prints a table and writes bench/results/convert.json.

- writer throughput: GPU ops per second through the one encoder, on one core.  A GPU op
  is what the CUPTI source yields for a kernel: a kernel slice with an interned name, the
  contract's args (correlation id, device, stream, grid x/y/z, block x/y/z, registers per
  thread, shared memory) and a flow; bytes per kernel in the file;
- the same with the API slice that launched each kernel;
- what `record` writes: kernel + API slice + flow (+ launch stack) as the CUPTI source hands
  them over, one SliceBatch (the writer's columnar path), against the same slices as
  objects in the same run;
- the same with deflate in a background thread (the only part that can use a 2nd core);
- convert: size ratio vs the input JSON and vs its .json.gz, speed in MB/s of JSON, at
  the compression level `xpu-perf convert` uses.
Each number is the median of --rounds runs.  With --baseline-rev REV the writer of that
git revision runs too, round by round interleaved with the current one (same events,
same core), so old and new are compared under the same noise.
"""

from __future__ import annotations

import argparse
import gzip
import importlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collector import model  # noqa: E402
from collector.sources import kineto, kineto_columns  # noqa: E402
from exporters.perfetto.writer import DEFAULT_COMPRESSION_LEVEL, TraceWriter  # noqa: E402

NAMES = [f"void kernel_{i}<float, 128>(float const*, float*, int)" for i in range(50)]


def kernel_args(i: int) -> dict[str, model.ArgValue]:
    """The args CUPTI gives a kernel; one fresh dict per op, as the source builds them."""
    k = i % len(NAMES)
    return {
        "grid_x": 128 + k,
        "grid_y": 1 + k % 3,
        "grid_z": 1,
        "block_x": 256,
        "block_y": 1,
        "block_z": 1,
        "registers_per_thread": 32 + k % 8,
        "shared_memory": 4096 * (k % 4),
    }


def make_ops(n: int, with_api: bool) -> list[model.Event]:
    events: list[model.Event] = [model.GpuDevice(0, "NVIDIA H100")]
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
                kernel_args(corr),
                correlation_id=corr,
                terminating_flow_ids=(fid,),
            )
        )
        ts += 3_100
    return events


STACKS = [
    model.Stack(
        tuple(
            model.Frame(f"frame_{d}_{k}", "/usr/lib/libtorch_cuda.so", 0x1000 + d)
            for d in range(30)
        )
    )
    for k in range(20)
]


def make_batch(n: int, with_stacks: bool) -> model.SliceBatch:
    """make_ops(n, with_api=True) as the CUPTI source now hands it over: one SliceBatch
    (numpy columns); with_stacks adds a launch stack (one of 20, 30 frames) to every call."""
    import numpy as np

    corr = np.arange(1, n + 1, dtype=np.int64)
    ts = 1_000_000_000 + 3_100 * np.arange(n, dtype=np.int64)
    arg_sets = [kernel_args(i) for i in range(len(NAMES))]  # kernel_args(i) repeats by i % 50
    cpu = model.SliceColumns(
        ts=ts,
        dur=np.full(n, 2_500, np.int64),
        track=np.full(n, 1234, np.int64),
        device=None,
        name=np.zeros(n, np.int64),
        names=["cudaLaunchKernel"],
        category=np.zeros(n, np.int64),
        categories=[model.CAT_CUDA_API],
        args=np.zeros(n, np.int64),
        arg_sets=[{}],
        correlation_id=corr,
        stack=(corr % len(STACKS)) if with_stacks else np.full(n, model.NONE, np.int64),
        stacks=STACKS,
    )
    gpu = model.SliceColumns(
        ts=ts + 4_000,
        dur=3_000 + corr % 97,
        track=np.full(n, 7, np.int64),
        device=np.zeros(n, np.int64),
        name=corr % len(NAMES),
        names=NAMES,
        category=np.zeros(n, np.int64),
        categories=[model.CAT_KERNEL],
        args=corr % len(NAMES),
        arg_sets=arg_sets,
        correlation_id=corr,
    )
    return model.SliceBatch(1234, cpu, gpu, np.arange(n), np.arange(n))


def bench_batch(n: int, with_stacks: bool, rounds: int) -> dict[str, Any]:
    """GPU op + API slice + flow (+ launch stack) per kernel as the CUPTI source's batch,
    and as the same slices given as objects gathered into one batch per window of 65,536
    by tests/slice_batches.py (other column order, interning and lanes), interleaved."""
    from tests.slice_batches import in_batches

    batch = make_batch(n, with_stacks)
    device = model.GpuDevice(0, "NVIDIA H100")
    objects = list(in_batches([device, *batch.slices()], 65536))
    inputs = {"columnar": [device, batch], "objects": objects}
    rates: dict[str, list[float]] = {label: [] for label in inputs}
    cpu_rates: dict[str, list[float]] = {label: [] for label in inputs}
    sizes: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "b.perfetto-trace"
        for r in range(rounds):
            labels = list(inputs) if r % 2 == 0 else list(inputs)[::-1]
            for label in labels:
                wall, cpu_s = run_writer(TraceWriter, inputs[label], path)
                rates[label].append(n / wall)
                cpu_rates[label].append(n / cpu_s)
                sizes[label] = path.stat().st_size / n
    return {
        "ops_per_s": statistics.median(rates["columnar"]),
        "ops_per_cpu_s": statistics.median(cpu_rates["columnar"]),
        "bytes_per_kernel": sizes["columnar"],
        "ops_per_s_rounds": rates["columnar"],
        "objects_ops_per_s": statistics.median(rates["objects"]),
        "objects_bytes_per_kernel": sizes["objects"],
        "objects_ops_per_s_rounds": rates["objects"],
        "speedup": statistics.median(
            c / o for c, o in zip(rates["columnar"], rates["objects"], strict=True)
        ),
    }


def load_baseline(rev: str, into: Path) -> Any:
    """The TraceWriter class of exporters/perfetto at git revision `rev`, as a package of
    its own (its modules import each other, never the current ones)."""
    package = into / "baseline_perfetto"
    package.mkdir()
    (package / "__init__.py").write_text("")
    listing = subprocess.run(
        ["git", "-C", str(REPO), "ls-tree", "--name-only", rev, "exporters/perfetto/"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    for path in listing:
        if path.endswith(".py"):
            source = subprocess.run(
                ["git", "-C", str(REPO), "show", f"{rev}:{path}"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            # Every spelling: `exporters.perfetto.x` and `from exporters.perfetto import x`
            # (the second was missed before, so a baseline's writer ran the current
            # tree's wire/batch_writer modules).
            source = source.replace("exporters.perfetto", "baseline_perfetto")
            (package / Path(path).name).write_text(source)
    sys.path.insert(0, str(into))
    return importlib.import_module("baseline_perfetto.writer").TraceWriter


def run_writer(
    writer_cls: Any, events: list[model.Event], path: Path, **kw: Any
) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) for one trace."""
    t0, c0 = time.perf_counter(), time.process_time()
    with writer_cls(path, **kw) as w:
        w.producer("bench").write_all(events)
    return time.perf_counter() - t0, time.process_time() - c0


def bench_writer(
    n: int, with_api: bool, rounds: int, baseline: Any | None, **kw: Any
) -> dict[str, Any]:
    """Rates by wall time (what the target names) and by CPU time (this process's, which
    other tenants of a shared machine do not inflate; for the threaded deflate it counts
    both threads)."""
    from tests.slice_batches import in_batches

    # The writer takes slices only in batches: windows of 65,536 (the baseline's too).
    events = list(in_batches(make_ops(n, with_api), 65536))
    labels = ["current"] + (["baseline"] if baseline else [])
    rates: dict[str, list[float]] = {label: [] for label in labels}
    cpu_rates: dict[str, list[float]] = {label: [] for label in labels}
    sizes: dict[str, list[float]] = {label: [] for label in labels}
    classes = {"current": TraceWriter, "baseline": baseline}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "w.perfetto-trace"
        for r in range(rounds):
            for label in labels if r % 2 == 0 else labels[::-1]:
                options = kw if label == "current" else {}
                wall, cpu = run_writer(classes[label], events, path, **options)
                rates[label].append(n / wall)
                cpu_rates[label].append(n / cpu)
                sizes[label].append(path.stat().st_size / n)
    out: dict[str, Any] = {
        "ops_per_s": statistics.median(rates["current"]),
        "ops_per_cpu_s": statistics.median(cpu_rates["current"]),
        "bytes_per_kernel": statistics.median(sizes["current"]),
        "ops_per_s_rounds": rates["current"],
    }
    if baseline:
        out["baseline_ops_per_s"] = statistics.median(rates["baseline"])
        out["baseline_ops_per_cpu_s"] = statistics.median(cpu_rates["baseline"])
        out["baseline_bytes_per_kernel"] = statistics.median(sizes["baseline"])
        out["baseline_ops_per_s_rounds"] = rates["baseline"]
        out["speedup"] = statistics.median(
            c / b for c, b in zip(rates["current"], rates["baseline"], strict=True)
        )
    return out


def convert_once(writer_cls: Any, src: Path, out: Path, **kw: Any) -> tuple[float, int]:
    """(seconds, kernels) of one conversion through convert's own path (the columns)."""
    t0 = time.perf_counter()
    stats = kineto.ConvertStats()
    head = kineto.read_head(src)
    with writer_cls(out, **kw) as w:
        w.producer("kineto").write_all(kineto_columns.convert_columns(src, head, stats))
    return time.perf_counter() - t0, stats.kernels


def bench_convert(src: Path, rounds: int, baseline: Any | None) -> dict[str, float]:
    """Sizes and speed of `convert` (its compression level); with a baseline writer, the
    same input through it, round by round interleaved."""
    if kineto.is_gzip(src):
        with gzip.open(src) as f:
            raw = len(f.read())
    else:
        raw = src.stat().st_size
    gz = src.stat().st_size
    runs: dict[str, tuple[Any, dict[str, Any]]] = {
        "current": (TraceWriter, {"compression_level": DEFAULT_COMPRESSION_LEVEL})
    }
    if baseline:
        # The same level for both, where the baseline's writer takes one: comparing
        # convert's level 10 with a baseline at its default 6 measured the level, not
        # the code.
        same = "compression_level" in inspect.signature(baseline).parameters
        runs["baseline"] = (baseline, runs["current"][1] if same else {})
    times: dict[str, list[float]] = {label: [] for label in runs}
    sizes: dict[str, int] = {}
    kernels = 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "c.perfetto-trace"
        for r in range(rounds):
            labels = list(runs) if r % 2 == 0 else list(runs)[::-1]
            for label in labels:
                writer_cls, kw = runs[label]
                seconds, kernels = convert_once(writer_cls, src, out, **kw)
                times[label].append(seconds)
                sizes[label] = out.stat().st_size
    t = statistics.median(times["current"])
    result: dict[str, float] = {
        "json_bytes": raw,
        "gz_bytes": gz,
        "out_bytes": sizes["current"],
        "ratio_vs_json": raw / sizes["current"],
        "ratio_vs_gz": gz / sizes["current"],
        "mb_per_s": raw / 1e6 / t,
        "seconds": t,
        "kernels": kernels,
        "out_bytes_per_kernel": sizes["current"] / max(kernels, 1),
    }
    if baseline:
        tb = statistics.median(times["baseline"])
        result.update(
            baseline_out_bytes=sizes["baseline"],
            baseline_ratio_vs_json=raw / sizes["baseline"],
            baseline_ratio_vs_gz=gz / sizes["baseline"],
            baseline_mb_per_s=raw / 1e6 / tb,
            baseline_out_bytes_per_kernel=sizes["baseline"] / max(kernels, 1),
        )
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline-rev", help="also run the writer of this git revision")
    ap.add_argument("--no-convert", action="store_true", help="writer benchmarks only")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/convert.json")
    args = ap.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[0]})  # "on one core"
    tmp = tempfile.TemporaryDirectory()
    baseline = load_baseline(args.baseline_rev, Path(tmp.name)) if args.baseline_rev else None
    result: dict[str, Any] = {
        # What `record` writes: the CUPTI source's batches (columnar path) against the
        # same slices as objects.
        "writer_batch_kernel_plus_api": bench_batch(args.ops, False, args.rounds),
        "writer_batch_kernel_plus_api_stack": bench_batch(args.ops, True, args.rounds),
        "writer_kernels_only": bench_writer(args.ops, False, args.rounds, baseline),
        "writer_kernel_plus_api": bench_writer(args.ops, True, args.rounds, baseline),
    }
    # The deflate level is most of the difference between these (default 6).
    for level in (1, 3):
        result[f"writer_kernels_only_level{level}"] = bench_writer(
            args.ops, False, args.rounds, None, compression_level=level
        )
    # Deflate off the encoding thread: on the one pinned core (what the target counts)...
    result["writer_kernels_only_deflate_thread_1core"] = bench_writer(
        args.ops, False, args.rounds, None, compress_in_thread=True
    )
    # ...and with a second core to run it on.
    os.sched_setaffinity(0, set(cores[:2]))
    result["writer_kernels_only_deflate_thread_2cores"] = bench_writer(
        args.ops, False, args.rounds, None, compress_in_thread=True
    )
    os.sched_setaffinity(0, {cores[0]})
    if not args.no_convert:
        result["convert"] = {
            p.name: bench_convert(p, args.rounds, baseline)
            for p in sorted((REPO / "bench/data").glob("kineto_*.json.gz"))
        }
    result.update(
        rounds=args.rounds,
        ops=args.ops,
        baseline_rev=args.baseline_rev,
        python=sys.version.split()[0],
    )
    print(f"{'writer':<44}{'ops/s':>10}{'ops/cpu-s':>11}{'B/kernel':>9}{'baseline ops/s':>16}")
    for key, r in result.items():
        if not key.startswith("writer_"):
            continue
        base = ""
        if "baseline_ops_per_s" in r:
            base = f"{r['baseline_ops_per_s']:>16,.0f} ({r['speedup']:.2f}x)"
        elif "objects_ops_per_s" in r:
            base = f"{r['objects_ops_per_s']:>16,.0f} ({r['speedup']:.2f}x, objects)"
        print(
            f"{key:<44}{r['ops_per_s']:>10,.0f}{r['ops_per_cpu_s']:>11,.0f}"
            f"{r['bytes_per_kernel']:>9.1f}{base}"
        )
    if "convert" in result:
        print(
            f"\n{'convert input':<34}{'JSON MB':>8}{'x JSON':>8}{'x gz':>7}{'MB/s':>7}{'B/kern':>8}"
            "   baseline: x JSON, x gz, MB/s, B/kern"
        )
        for name, r in result["convert"].items():
            base = (
                f"   {r['baseline_ratio_vs_json']:.1f}, {r['baseline_ratio_vs_gz']:.2f}, "
                f"{r['baseline_mb_per_s']:.1f}, {r['baseline_out_bytes_per_kernel']:.0f}"
                if "baseline_out_bytes" in r
                else ""
            )
            print(
                f"{name:<34}{r['json_bytes'] / 1e6:>8.2f}{r['ratio_vs_json']:>8.1f}"
                f"{r['ratio_vs_gz']:>7.2f}{r['mb_per_s']:>7.1f}{r['out_bytes_per_kernel']:>8.0f}"
                f"{base}"
            )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\nwrote {args.out}")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
