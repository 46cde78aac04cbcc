"""`convert` on hostile Kineto JSON: time and peak memory at two sizes of each shape.

    .venv/bin/python bench/hostile_json.py [--scale 1.0] [--keep DIR]

Shapes (each written gzipped, streaming, into a temporary directory, deleted after):
- instants: N instant events (`"ph": "i"`), nothing else;
- args: one complete event with N args;
- string: one event whose name is N bytes long;
- depth: one event whose arg nests N arrays;
- depth_top: a document that is N nested arrays and nothing else.
Each at a tenth of its size and at its size (10M instants, 1M args, a 1 GB string, depth
200,000), `xpu-perf convert` in a fresh process: wall time, peak RSS (the child's
ru_maxrss), exit status and the last line of its output (converted, or refused in one
line).  Prints a table and writes bench/results/hostile_json.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
_BLOCK = 1 << 20


def instants(n: int) -> Iterator[bytes]:
    yield b'{"traceEvents":['
    step = 10_000
    for first in range(0, n, step):
        yield b",".join(
            b'{"ph":"i","s":"t","name":"mark","pid":1,"tid":1,"ts":%d}' % i
            for i in range(first, min(n, first + step))
        ) + (b"," if first + step < n else b"")
    yield b"]}"


def args(n: int) -> Iterator[bytes]:
    yield b'{"traceEvents":[{"ph":"X","name":"op","pid":1,"tid":1,"ts":1,"dur":1,"args":{'
    step = 10_000
    for first in range(0, n, step):
        yield b",".join(b'"k%d":%d' % (i, i) for i in range(first, min(n, first + step))) + (
            b"," if first + step < n else b""
        )
    yield b"}}]}"


def string(n: int) -> Iterator[bytes]:
    yield b'{"traceEvents":[{"ph":"X","pid":1,"tid":1,"ts":1,"dur":1,"name":"'
    block = b"a" * _BLOCK
    for first in range(0, n, _BLOCK):
        yield block[: min(_BLOCK, n - first)]
    yield b'"}]}'


def depth(n: int) -> Iterator[bytes]:
    yield b'{"traceEvents":[{"ph":"X","name":"op","pid":1,"tid":1,"ts":1,"dur":1,"args":{"a":'
    yield b"[" * n
    yield b"]" * n
    yield b"}}]}"


def depth_top(n: int) -> Iterator[bytes]:
    yield b"[" * n
    yield b"]" * n


SHAPES: dict[str, tuple[Callable[[int], Iterator[bytes]], int]] = {
    "instants": (instants, 10_000_000),
    "args": (args, 1_000_000),
    "string": (string, 1 << 30),
    "depth": (depth, 200_000),
    "depth_top": (depth_top, 200_000),
}


def write(path: Path, parts: Iterator[bytes]) -> int:
    """The parts gzipped into `path` (never held whole); the JSON text's size."""
    size = 0
    with gzip.open(path, "wb", compresslevel=1) as out:
        for part in parts:
            out.write(part)
            size += len(part)
    return size


def convert(src: Path, out: Path) -> dict[str, object]:
    """`xpu-perf convert` in a child, from a measuring process of its own (--one): its
    wall time, and its peak RSS (RUSAGE_CHILDREN's ru_maxrss is the largest child's: the
    only one here)."""
    import resource

    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "convert", str(src), "-o", str(out), "-q"],
        capture_output=True,
        env=env,
        cwd=REPO,
    )
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    lines = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
    return {
        "exit": proc.returncode,
        "seconds": round(seconds, 2),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "output_lines": len(lines),
        "said": lines[-1] if lines else ("converted" if proc.returncode == 0 else ""),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="sizes times this (default 1)")
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--one", nargs=2, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    ap.add_argument("--keep", type=Path, help="write the inputs here and keep them")
    opts = ap.parse_args()
    if opts.one:  # a measuring process of its own (see convert)
        print(json.dumps(convert(Path(opts.one[0]), Path(opts.one[1]))))
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="hostile-json-") as tmp:
        work = opts.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for shape in opts.shapes:
            make, full = SHAPES[shape]
            for n in (max(1, int(full * opts.scale) // 10), max(1, int(full * opts.scale))):
                src = work / f"{shape}_{n}.json.gz"
                text_bytes = write(src, make(n))
                measured = subprocess.run(
                    [sys.executable, __file__, "--one", str(src), str(work / "out.pftrace")],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = {
                    "shape": shape,
                    "n": n,
                    "json_mb": round(text_bytes / 1e6, 1),
                    "gz_mb": round(src.stat().st_size / 1e6, 2),
                    **json.loads(measured.stdout),
                }
                rows.append(row)
                print(
                    f"{shape:<10} {n:>13,} {row['json_mb']:>9.1f} MB {row['gz_mb']:>7.2f} MB gz "
                    f"{row['seconds']:>7.2f} s {row['peak_rss_mb']:>7} MB  exit {row['exit']}  "
                    f"{str(row['said'])[:90]}",
                    flush=True,
                )
                if opts.keep is None:
                    src.unlink()
                (work / "out.pftrace").unlink(missing_ok=True)
    result = {
        "what": "convert on hostile Kineto JSON: wall time and peak RSS of the convert process",
        "machine": f"{platform.machine()}, {platform.python_version()}, {os.cpu_count()} CPUs",
        "scale": opts.scale,
        "rows": rows,
    }
    out = REPO / "bench" / "results" / "hostile_json.json"
    if opts.scale == 1.0 and opts.shapes == list(SHAPES):
        out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
