"""Big traces (issue 24): another checkout's `folded` and `report` against this one's on the
same trace, alternating, each step its own process, for before/after tables.

    git -C /work/main archive HEAD | tar -x -C /tmp/base
    python bench/scale_ab.py TRACE --base /tmp/base --rounds 3 --out bench/results/x.json

Per round, for load (`query TRACE "select count(*) from slice" --no-cache`), `folded --mode
gpu --no-cache` and `report -o page.html --no-cache`: the base then this checkout, the order
swapped every other round.  Wall and CPU time (user + system, from wait4) and peak RSS of
each; medians; "on top of the load" is (command - load) / load, by wall and by CPU time, the
load being the median of both checkouts' loads (the same code).  On this shared 2-core VM
the neighbours move wall time by tens of percent and the CPU time by a few: both are kept.
With --second-look: each checkout's report and folded with the result cache (a fresh cache
directory per checkout): the first look, then two more.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from measured import run_measured  # noqa: E402

from collector import cache_trust  # noqa: E402


def run(checkout: Path, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Wall time, CPU time and peak RSS (MB) of one `xpu-perf` command run from `checkout`."""
    environ = dict(os.environ, PYTHONPATH=str(checkout), **(env or {}))
    cmd = [sys.executable, "-m", "collector.cli", *args]
    return run_measured(cmd, cwd=checkout, env=environ)[0]


def steps(trace: Path, work: Path, side: str) -> dict[str, list[str]]:
    folded = work / f"{side}.folded"
    return {
        "load": ["query", str(trace), "select count(*) from slice", "--no-cache"],
        "folded": ["folded", str(trace), "--mode", "gpu", "-o", str(folded), "--no-cache"],
        "report": ["report", str(trace), "-o", str(work / f"{side}.html"), "--no-cache"],
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in runs), 2) for k in ("s", "cpu_s", "rss_mb")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", type=Path)
    ap.add_argument("--base", type=Path, required=True, help="the other checkout")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--second-look", action="store_true")
    ap.add_argument("--work", type=Path, default=Path("/tmp/xpu-perf-scale-ab"))
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    sides = {"base": args.base.resolve(), "branch": REPO}
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {s: {} for s in sides}
    for n in range(args.rounds):
        order = list(sides) if n % 2 == 0 else list(reversed(sides))
        for name in ("load", "folded", "report"):
            for side in order:
                result = run(sides[side], steps(args.trace, args.work, side)[name])
                rounds[side].setdefault(name, []).append(result)
                print(f"round {n + 1} {name:<7} {side:<6} {result}", flush=True)
        print(f"  load average {os.getloadavg()}", flush=True)
    load = {
        k: statistics.median(r[k] for s in sides for r in rounds[s]["load"]) for k in ("s", "cpu_s")
    }
    summary: dict[str, Any] = {}
    for side in sides:
        m = {name: medians(runs) for name, runs in rounds[side].items()}
        for name in ("folded", "report"):
            m[name]["on_top"] = round((m[name]["s"] - load["s"]) / load["s"], 2)
            m[name]["cpu_on_top"] = round((m[name]["cpu_s"] - load["cpu_s"]) / load["cpu_s"], 2)
        summary[side] = m
    doc: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "trace": str(args.trace),
        "load_median": load,
        "medians": summary,
        "rounds": rounds,
    }
    if args.second_look:
        looks: dict[str, Any] = {}
        for side, checkout in sides.items():
            root = args.work / f"cache_{side}"
            cache = {"XDG_CACHE_HOME": str(root)}
            # A fresh result store, but the compiled engine of the usual cache: without it
            # the first look compiles the wasm (4-6 s), which is not what a look costs.
            compiled = cache_trust.cache_root() / "xpu-perf" / "wasm"
            if compiled.is_dir() and not (root / "xpu-perf" / "wasm").exists():
                (root / "xpu-perf").mkdir(parents=True, mode=0o700)
                shutil.copytree(compiled, root / "xpu-perf" / "wasm")
            folded = args.work / f"{side}.folded"
            for what, cmd in (
                ("report", ["report", str(args.trace), "-o", str(args.work / f"{side}.html")]),
                (
                    "folded",
                    ["folded", str(args.trace), "--mode", "gpu", "-o", str(folded)],
                ),
            ):
                looks[f"{side}_{what}"] = [run(checkout, cmd, cache) for _ in range(3)]
                print(f"{side} {what} looks: {looks[f'{side}_{what}']}", flush=True)
        doc["looks"] = looks
    print(json.dumps(summary, indent=1))
    args.out.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
