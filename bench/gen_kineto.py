"""Record PyTorch profiler (Kineto) Chrome JSON traces of the shared GPU workloads.

    PYTHONUNBUFFERED=1 python3 bench/gen_kineto.py --out DIR [--variant NAME ...] [--steps N]

Each variant runs one or more workloads from bench/workloads under torch.profiler
(CPU + CUDA activities, record_shapes=True; with_stack=True where the variant says so),
writes DIR/<file>.json.gz, prints the counts a converter cares about (kernels, memcpys,
memsets, ac2g flows, kernel time) and writes them all to DIR/kineto_stats.json.
These traces are the inputs of `xpu-perf convert` tests and benchmarks (bench/data/).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.workloads.timing import Step


@dataclass(frozen=True)
class Variant:
    """One output trace: which workloads run (in order, with their step counts) and how."""

    file_name: str
    workloads: tuple[tuple[str, int], ...]
    with_stack: bool = False
    # CUPTI synchronization records (stream waits, event syncs) appear in Kineto only when
    # asked for; the multi-stream traces ask so that converters see cat "cuda_sync".
    sync_events: bool = False


VARIANTS: dict[str, Variant] = {
    "example": Variant(
        "example_kineto.json.gz",
        (("launch_bound", 3), ("multi_stream", 2)),
        sync_events=True,
    ),
    "launch_bound": Variant("kineto_launch_bound.json.gz", (("launch_bound", 50),)),
    "launch_bound_stack": Variant(
        "kineto_launch_bound_stack.json.gz", (("launch_bound", 50),), with_stack=True
    ),
    "multi_stream": Variant(
        "kineto_multi_stream.json.gz", (("multi_stream", 50),), sync_events=True
    ),
    "cuda_graph": Variant("kineto_cuda_graph.json.gz", (("cuda_graph", 50),)),
    "compute_bound": Variant("kineto_compute_bound.json.gz", (("compute_bound", 20),)),
}

KERNEL_CAT = "kernel"
MEMCPY_CAT = "gpu_memcpy"
MEMSET_CAT = "gpu_memset"
FLOW_CAT = "ac2g"


def make_step(workload: str) -> Step:
    module = importlib.import_module(f"bench.workloads.{workload}")
    return module.make_step()


def experimental_config(sync_events: bool) -> Any:
    """An _ExperimentalConfig asking for CUDA sync events, or None where torch lacks it."""
    if not sync_events:
        return None
    try:
        return torch._C._profiler._ExperimentalConfig(enable_cuda_sync_events=True)
    except (AttributeError, TypeError) as error:
        print(f"  (no cuda sync events in this torch: {error})")
        return None


def record(variant: Variant, warmup: int, raw_path: str) -> dict[str, float]:
    """Profile the variant's workloads into raw_path; return profiled wall ms per step."""
    steps = [(name, count, make_step(name)) for name, count in variant.workloads]
    for _, _, step in steps:
        for _ in range(warmup):
            step()
    torch.cuda.synchronize()
    wall_ms: dict[str, float] = {}
    options: dict[str, Any] = {}
    config = experimental_config(variant.sync_events)
    if config is not None:
        options["experimental_config"] = config
    with profile(
        activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
        record_shapes=True,
        with_stack=variant.with_stack,
        **options,
    ) as profiler:
        for name, count, step in steps:
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(count):
                step()
                profiler.step()
            torch.cuda.synchronize()
            wall_ms[name] = (time.perf_counter() - start) * 1e3 / count
    profiler.export_chrome_trace(raw_path)
    return wall_ms


def trace_stats(raw_path: str, gz_path: str) -> dict[str, Any]:
    with open(raw_path, encoding="utf-8") as handle:
        trace = json.load(handle)
    events = trace["traceEvents"]
    by_cat = collections.Counter(str(event.get("cat")) for event in events)
    by_phase = collections.Counter(str(event.get("ph")) for event in events)
    flows = collections.Counter(event["ph"] for event in events if event.get("cat") == FLOW_CAT)
    kernel_us = sum(float(e.get("dur", 0)) for e in events if e.get("cat") == KERNEL_CAT)
    return {
        "events": len(events),
        "kernels": by_cat[KERNEL_CAT],
        "memcpy": by_cat[MEMCPY_CAT],
        "memset": by_cat[MEMSET_CAT],
        "ac2g_flow_start": flows["s"],
        "ac2g_flow_finish": flows["f"],
        "kernel_dur_sum_us": round(kernel_us, 3),
        "raw_bytes": os.path.getsize(raw_path),
        "gz_bytes": os.path.getsize(gz_path),
        "by_cat": dict(sorted(by_cat.items())),
        "by_phase": dict(sorted(by_phase.items())),
        "top_level_keys": sorted(key for key in trace if key != "traceEvents"),
    }


def gzip_file(raw_path: str, gz_path: str) -> None:
    with (
        open(raw_path, "rb") as source,
        gzip.open(gz_path, "wb", compresslevel=9) as sink,
    ):
        while chunk := source.read(1 << 20):
            sink.write(chunk)


def environment() -> dict[str, str]:
    properties = torch.cuda.get_device_properties(0)
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": str(torch.version.cuda),
        "cudnn": str(torch.backends.cudnn.version()),
        "gpu": properties.name,
        "capability": f"{properties.major}.{properties.minor}",
        "sm_count": str(properties.multi_processor_count),
        "gpu_memory_mib": str(properties.total_memory // (1 << 20)),
        "kernel": platform.release(),
    }
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        info["nvidia_smi"] = smi.stdout.strip()
    except (OSError, subprocess.SubprocessError) as error:
        info["nvidia_smi"] = f"unavailable: {error}"
    return info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the .json.gz traces")
    parser.add_argument(
        "--variant",
        action="append",
        choices=sorted(VARIANTS),
        help="repeatable; default all",
    )
    parser.add_argument("--steps", type=int, help="override every workload's step count")
    parser.add_argument("--warmup", type=int, default=5, help="unprofiled steps first")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)

    env = environment()
    for key, value in env.items():
        print(f"{key}: {value}")
    results: dict[str, Any] = {"environment": env, "traces": {}}
    failed: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.variant or list(VARIANTS):
            variant = VARIANTS[name]
            if args.steps is not None:
                workloads = tuple((w, args.steps) for w, _ in variant.workloads)
                variant = Variant(
                    variant.file_name,
                    workloads,
                    variant.with_stack,
                    variant.sync_events,
                )
            raw_path = os.path.join(scratch, variant.file_name.removesuffix(".gz"))
            gz_path = os.path.join(args.out, variant.file_name)
            print(f"\n== {name}: {variant}")
            started = time.perf_counter()
            try:
                wall_ms = record(variant, args.warmup, raw_path)
            except (RuntimeError, ValueError, TypeError, AttributeError, OSError):
                # Keep the other variants of a costly device run going.
                traceback.print_exc()
                failed.append(name)
                continue
            gzip_file(raw_path, gz_path)
            stats = trace_stats(raw_path, gz_path)
            stats["profiled_wall_ms_per_step"] = {k: round(v, 3) for k, v in wall_ms.items()}
            stats["workloads"] = [list(w) for w in variant.workloads]
            stats["with_stack"] = variant.with_stack
            stats["sync_events"] = variant.sync_events
            results["traces"][variant.file_name] = stats
            os.remove(raw_path)
            for key, value in stats.items():
                print(f"  {key}: {value}")
            print(f"  generated in {time.perf_counter() - started:.1f} s")
    with open(os.path.join(args.out, "kineto_stats.json"), "w", encoding="utf-8") as handle:
        json.dump(results, handle, indent=2)
    if failed:
        sys.exit(f"failed variants: {', '.join(failed)}")


if __name__ == "__main__":
    main()
