"""New SQL on a looked-at trace (issue 24, item 3): the engine snapshot against a load.

    python bench/second_look.py TRACE... [--rounds 3] [--work /tmp/second_look]

Each step is an `xpu-perf` subprocess of its own (peak RSS from wait4), with a private
cache directory under --work (XDG_CACHE_HOME: the compiled engine is kept there, the result
store and the snapshots are emptied where a step needs a first look).  Per trace and round,
alternating:
- load: `query TRACE "select count(*) from slice"` with snapshots off
  (XPU_PERF_ENGINE_CACHE_MB=0) and an empty cache: what any new SQL cost before;
- first look: the same with snapshots on and an empty cache (the load, plus writing the
  snapshot);
- second look, new SQL: `query` with a statement the result store has never seen (the
  engine restored from the snapshot; on `slice`, next to nothing to compute);
- folded after query: `folded --mode gpu` after the above (restored, then folded's SQL),
  beside `folded --mode gpu --no-cache` (loaded, then folded's SQL).
Then, in-process on one engine: the save and the restore timed alone, the heap and the
snapshot's bytes, and what deflate (level 1, the `deflate` package already used for the
trace) would make of the same pages: its size, compress and decompress time.
Results: a table on stdout and bench/results/second_look.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measured import run_measured  # noqa: E402

# A statement new to the result store on every look, whose own SQL is next to nothing: the
# second look's time is the engine's start (a restore, or a load).  A heavier statement
# adds its own time, the same on a restored engine as on a loaded one.
NEW_SQL = "select count(*) + {n} as n from slice"


def run(cmd: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Wall time, CPU time and peak RSS (MB, from wait4) of one subprocess, and what it said
    on stderr (a refused snapshot, a note) where it said anything."""
    row, _, stderr = run_measured(cmd, cwd=REPO, env=env)
    notes = stderr.strip()
    return row | ({"stderr": notes} if notes else {})


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "collector.cli", *map(str, args)]


def empty(cache: Path) -> None:
    for name in ("results", "engine"):
        shutil.rmtree(cache / "xpu-perf" / name, ignore_errors=True)


def looks(trace: Path, cache: Path, rounds: int) -> dict[str, Any]:
    env = dict(os.environ, XDG_CACHE_HOME=str(cache), PYTHONPATH=str(REPO))
    env.pop("XPU_PERF_NO_CACHE", None)
    off = dict(env, XPU_PERF_ENGINE_CACHE_MB="0")
    count = cli("query", trace, "select count(*) from slice")
    run(count, off)  # the engine compiled into this cache once, outside the timings
    steps: dict[str, list[dict[str, Any]]] = {}
    for n in range(rounds):
        empty(cache)
        steps.setdefault("load", []).append(run(count, off))
        empty(cache)
        steps.setdefault("first look", []).append(run(count, env))
        snapshot = sum(p.stat().st_size for p in (cache / "xpu-perf" / "engine").glob("*.heap"))
        steps.setdefault("snapshot MB", []).append({"s": round(snapshot / 1e6, 1)})
        sql = NEW_SQL.format(n=n)
        steps.setdefault("second look, new SQL", []).append(run(cli("query", trace, sql), env))
        steps.setdefault("folded, loaded", []).append(
            run(cli("folded", trace, "--mode", "gpu", "--no-cache"), env)
        )
        steps.setdefault("folded after query", []).append(
            run(cli("folded", trace, "--mode", "gpu"), env)
        )
        print(
            f"  round {n + 1}: "
            + ", ".join(f"{k} {v[-1]['s']}" for k, v in steps.items())
            + f" (load {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    return {
        step: {
            "median_s": round(statistics.median(r["s"] for r in rows), 2),
            "rounds": rows,
        }
        for step, rows in steps.items()
    }


def in_process(trace: Path, cache: Path) -> dict[str, Any]:
    """The save and the restore alone, and deflate on the same pages."""
    import deflate

    os.environ["XDG_CACHE_HOME"] = str(cache)
    from exporters.perfetto.engine import engine_snapshot
    from exporters.perfetto.engine.result_cache import trace_key
    from exporters.perfetto.engine.trace_processor import open_trace

    empty(cache)
    engine_snapshot.MIN_LOAD_S = 0.0  # a small trace's save is timed too
    snapshots = engine_snapshot.EngineSnapshots(trace_key(trace))
    start = time.perf_counter()
    t = open_trace(trace)
    load = time.perf_counter() - start
    heap = t._tp.http.transport.heap_view()
    heap_bytes = len(heap)
    start = time.perf_counter()
    snapshots.save(t, load)
    save = time.perf_counter() - start
    runs = engine_snapshot._runs(heap)
    pages = [heap[a * engine_snapshot.PAGE : (a + n) * engine_snapshot.PAGE] for a, n in runs]
    block = 4 * 1024**2
    start = time.perf_counter()
    packed = [
        (deflate.deflate_compress(p[i : i + block], 1), len(p[i : i + block]))
        for p in pages
        for i in range(0, len(p), block)
    ]
    compress = time.perf_counter() - start
    start = time.perf_counter()
    for data, size in packed:
        deflate.deflate_decompress(data, size)
    decompress = time.perf_counter() - start
    del heap, pages
    t.close()
    start = time.perf_counter()
    restored = snapshots.restore()
    restore = time.perf_counter() - start
    assert restored is not None
    restored.close()
    return {
        "load_s": round(load, 2),
        "heap_mb": round(heap_bytes / 1e6, 1),
        "snapshot_mb": round(snapshots.path.stat().st_size / 1e6, 1),
        "save_s": round(save, 2),
        "restore_s": round(restore, 2),
        "deflate1_mb": round(sum(len(d) for d, _ in packed) / 1e6, 1),
        "deflate1_compress_s": round(compress, 2),
        "deflate1_decompress_s": round(decompress, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("traces", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "second_look")
    parser.add_argument("--out", type=Path, default=REPO / "bench/results/second_look.json")
    args = parser.parse_args()
    cache = args.work / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    results = []
    for trace in args.traces:
        print(f"{trace} ({trace.stat().st_size / 1e6:.1f} MB)", flush=True)
        row: dict[str, Any] = {
            "trace": trace.name,
            "trace_mb": round(trace.stat().st_size / 1e6, 1),
        }
        row["looks"] = looks(trace, cache, args.rounds)
        row["in_process"] = in_process(trace, cache)
        print(f"  in-process: {row['in_process']}", flush=True)
        results.append(row)
    print()
    steps = list(results[0]["looks"])
    print("| trace | " + " | ".join(steps) + " | heap MB | save s | restore s |")
    print("|---" * (len(steps) + 4) + "|")
    for row in results:
        cells = [str(row["looks"][s]["median_s"]) for s in steps]
        p = row["in_process"]
        print(
            f"| {row['trace']} | "
            + " | ".join(cells)
            + f" | {p['heap_mb']} | {p['save_s']} | {p['restore_s']} |"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs",
        "load_at_end": round(os.getloadavg()[0], 2),
        "results": results,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
