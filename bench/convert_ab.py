"""`xpu-perf convert` of several checkouts beside the bare JSON parser, alternating.

    python bench/convert_ab.py INPUT.json --checkout base=/tmp/base --checkout this=. \
        --rounds 3 [--out bench/results/convert_ab.json]

Per round, each its own process (CPU time and peak RSS from wait4): the ijson parse
(bench/scale.py's PARSE: the floor issue 24 holds convert to), then `convert` of each
checkout, the checkouts' order rotated every round (the VM is shared: a neighbour's burst
should not always land on the same one).  A checkout's convert runs that checkout's
`collector.cli.main` (its directory first on sys.path: with its compiled modules where
they are built there: bench/mypyc_build.py) under one fixed command line, so the traces of
the checkouts can be compared byte for byte (reported); besides wall and CPU time, the
main thread's CPU time (`time.thread_time`) around the command: what the parse competes
with, deflate running on a thread of its own.  Medians and each round on stdout and in
--out.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measured import run_measured
from scale import PARSE

# Runs in the checkout: the conversion as `xpu-perf convert` runs it, timed around main().
CONVERT = """
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from collector import cli
from collector.sources import kineto
argv = ["convert", sys.argv[1], "-o", sys.argv[2], "-q", "--no-progress"]
sys.argv = ["xpu-perf", *argv]  # the metadata's command line: the same in every checkout
wall, cpu = time.perf_counter(), time.thread_time()
code = cli.main(argv)
cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
print(json.dumps({"code": code, "main_cpu_s": cpu, "main_s": wall, "kineto": kineto.__file__}))
"""


def run(cmd: list[str], cwd: Path | None = None) -> dict[str, Any]:
    """Wall time, CPU time (user + system), peak RSS (MB) of one process; its stdout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the checkout's code
    row, stdout, _ = run_measured(cmd, cwd=cwd, env=env, digits=3)
    return row | {"stdout": stdout}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", type=Path, help="Kineto JSON")
    ap.add_argument("--checkout", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    checkouts = [(n, Path(d).resolve()) for n, d in (c.split("=", 1) for c in args.checkout)]
    loads = [os.getloadavg()[0]]
    rounds: list[dict[str, Any]] = []
    for r in range(args.rounds):
        row: dict[str, Any] = {"parse": run([sys.executable, "-c", PARSE, str(args.input)])}
        del row["parse"]["stdout"]
        k = r % len(checkouts)
        for name, where in checkouts[k:] + checkouts[:k]:
            # One output name for all (the command line is in the trace), kept apart after.
            trace = args.work / "convert_ab.perfetto-trace"
            got = run([sys.executable, "-c", CONVERT, str(args.input), str(trace)], cwd=where)
            trace.replace(args.work / f"convert_ab_{name}.perfetto-trace")
            inner = json.loads(got.pop("stdout"))
            got.update(
                main_cpu_s=round(inner["main_cpu_s"], 3),
                compiled=inner["kineto"].endswith(".so"),
            )
            row[name] = got
        names = [n for n, _ in checkouts]
        first = args.work / f"convert_ab_{names[0]}.perfetto-trace"
        row["same_bytes"] = all(
            filecmp.cmp(first, args.work / f"convert_ab_{n}.perfetto-trace", shallow=False)
            for n in names[1:]
        )
        loads.append(os.getloadavg()[0])
        rounds.append(row)
        parse = row["parse"]
        print(
            f"round {r + 1} (load {loads[-1]:.1f}): parse {parse['s']:.2f} s (CPU "
            f"{parse['cpu_s']:.2f})"
            + "".join(
                f"; {n} {row[n]['s']:.2f} s, CPU {row[n]['cpu_s']:.2f}, main thread "
                f"{row[n]['main_cpu_s']:.2f}, {row[n]['s'] / parse['s']:.2f}x parse"
                f"{' (compiled)' if row[n]['compiled'] else ''}"
                for n in names
            )
            + f"; same bytes: {row['same_bytes']}",
            flush=True,
        )
    summary: dict[str, Any] = {
        "input": str(args.input),
        "rounds": rounds,
        "load_avg": loads,
        "parse_s": statistics.median(r["parse"]["s"] for r in rounds),
        "parse_cpu_s": statistics.median(r["parse"]["cpu_s"] for r in rounds),
    }
    for name, _ in checkouts:
        summary[name] = {
            key: round(statistics.median(r[name][key] for r in rounds), 3)
            for key in ("s", "cpu_s", "main_cpu_s", "rss_mb")
        }
        summary[name]["x_parse"] = round(
            statistics.median(r[name]["s"] / r["parse"]["s"] for r in rounds), 2
        )
        summary[name]["x_parse_cpu"] = round(
            statistics.median(r[name]["main_cpu_s"] / r["parse"]["cpu_s"] for r in rounds), 2
        )
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
