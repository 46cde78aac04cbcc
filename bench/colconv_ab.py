"""The columnar Kineto prototype beside main's `convert` and the bare ijson parse, alternating.

    python bench/colconv_ab.py INPUT.json --base /work/main --rounds 3 [--out FILE]

Per round, each its own process, the order rotated every round (the VM is shared): the
ijson parse (bench/scale.py's PARSE, issue 24's floor), convert's reader alone
(PARSE_FAST), `convert` of the base checkout (bench/convert_ab.py's CONVERT: cli.main
timed in-process), and this checkout's prototype (collector/commands/convert_columns.py,
timed the same way).  Wall, CPU (all threads, wait4), the main thread's CPU
(`time.thread_time` around the conversion: deflate runs on a thread of its own) and peak
RSS; medians and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from convert_ab import CONVERT, run
from scale import PARSE, PARSE_FAST

REPO = Path(__file__).resolve().parent.parent
COLUMNS = """
import json, os, sys, time
sys.path.insert(0, os.getcwd())
from pathlib import Path
wall, cpu = time.perf_counter(), time.thread_time()
from collector.commands import convert_columns  # timed, as cli.main's lazy imports are
convert_columns.write_trace(Path(sys.argv[1]), Path(sys.argv[2]), ["xpu-perf", "convert"])
cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
print(json.dumps({"main_cpu_s": cpu, "main_s": wall}))
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("--base", type=Path, required=True, help="checkout of main")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    steps: list[tuple[str, list[str], Path]] = [
        ("parse", [sys.executable, "-c", PARSE, str(args.input)], REPO),
        ("reader", [sys.executable, "-c", PARSE_FAST, str(args.input)], REPO),
        (
            "main",
            [sys.executable, "-c", CONVERT, str(args.input), str(args.work / "ab_main.pftrace")],
            args.base.resolve(),
        ),
        (
            "columns",
            [sys.executable, "-c", COLUMNS, str(args.input), str(args.work / "ab_cols.pftrace")],
            REPO,
        ),
    ]
    rounds: list[dict[str, Any]] = []
    loads = [os.getloadavg()[0]]
    for r in range(args.rounds):
        row: dict[str, Any] = {}
        k = r % len(steps)
        for name, cmd, cwd in steps[k:] + steps[:k]:
            got = run(cmd, cwd=cwd)
            text = got.pop("stdout")
            if name in ("main", "columns"):
                got["main_cpu_s"] = round(json.loads(text)["main_cpu_s"], 3)
            row[name] = got
        loads.append(os.getloadavg()[0])
        rounds.append(row)
        p = row["parse"]
        print(
            f"round {r + 1} (load {loads[-1]:.1f}): parse {p['s']:.2f} s (CPU {p['cpu_s']:.2f}); "
            f"reader {row['reader']['s']:.2f} s; "
            + "; ".join(
                f"{n} {row[n]['s']:.2f} s, CPU {row[n]['cpu_s']:.2f}, main thread "
                f"{row[n]['main_cpu_s']:.2f} ({row[n]['main_cpu_s'] / p['cpu_s']:.2f}x parse CPU, "
                f"wall {row[n]['s'] / p['s']:.2f}x), {row[n]['rss_mb']} MB"
                for n in ("main", "columns")
            ),
            flush=True,
        )
    summary: dict[str, Any] = {"input": str(args.input), "rounds": rounds, "load_avg": loads}
    for name, *_ in steps:
        keys = ["s", "cpu_s", "rss_mb"] + (["main_cpu_s"] if name in ("main", "columns") else [])
        summary[name] = {k: statistics.median(r[name][k] for r in rounds) for k in keys}
    for name in ("main", "columns"):
        summary[name]["x_parse_wall"] = round(
            statistics.median(r[name]["s"] / r["parse"]["s"] for r in rounds), 2
        )
        summary[name]["x_parse_main_cpu"] = round(
            statistics.median(r[name]["main_cpu_s"] / r["parse"]["cpu_s"] for r in rounds), 2
        )
    print(json.dumps({k: v for k, v in summary.items() if k != "rounds"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
