"""What the default span costs `folded` (issue 35): `folded TRACE --no-cache` with the default
span (the steady state the findings cover, which the analysis finds) beside `--span all`
(no analysis), on a big converted trace, uncached, the two interleaved round by round (this
VM is shared: a ratio is worth something within one round).

    python bench/folded_span.py --trace BIG.perfetto-trace [--rounds 3] [--mode merge]
    python bench/folded_span.py --slices 1000000 --work /tmp/fs   # builds the trace first
    python bench/folded_span.py --trace BIG --repo before=/path/to/old/checkout --repo after=.

With several --repo NAME=CHECKOUT, each round runs every checkout's folded (both spans), so
a before/after pair shares the machine's state.

The trace: bench/scale_input.py's Kineto trace of --slices complete events, converted.
Results: a table on stdout and bench/results/folded_span.json (medians, every round, the
span's extra time over --span all as a share).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import scale_input  # noqa: E402
from measured import run_measured  # noqa: E402

RESULTS = REPO / "bench" / "results" / "folded_span.json"


def cli(*args: str | Path) -> list[str]:
    return [sys.executable, "-m", "collector.cli", *map(str, args)]


def in_checkout(repo: Path) -> dict[str, str]:
    """The environment that runs `repo`'s code (its modules first on the path)."""
    return dict(os.environ, PYTHONPATH=str(repo))


def built_trace(work: Path, slices: int) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    trace = work / f"kineto_{slices}.perfetto-trace"
    if not trace.exists():
        kineto = work / f"kineto_{slices}.json.gz"
        if not kineto.exists():
            scale_input.build(kineto, slices)
        run_measured(cli("convert", kineto, "-o", trace, "-q"), cwd=REPO)
    return trace


def measure(
    trace: Path, rounds: int, mode: str, work: Path, repos: dict[str, Path]
) -> dict[str, object]:
    runs: dict[str, dict[str, list[dict[str, float | int | str]]]] = {
        name: {"steps": [], "all": []} for name in repos
    }
    for _ in range(rounds):
        for name, repo in repos.items():
            for span in ("steps", "all"):
                flags = () if span == "steps" else ("--span", "all")
                out = work / f"{name}_{span}.folded"
                row, _, stderr = run_measured(
                    cli("folded", trace, "--mode", mode, "--no-cache", "-o", out, *flags),
                    cwd=repo,
                    env=in_checkout(repo),
                )
                row["said"] = stderr.strip().splitlines()[-1]
                runs[name][span].append(row)
    checkouts: dict[str, object] = {}
    result: dict[str, object] = {
        "trace": str(trace),
        "trace_mb": round(trace.stat().st_size / 1e6, 1),
        "mode": mode,
        "rounds": rounds,
        "checkouts": checkouts,
    }
    for name, by_span in runs.items():
        median = {
            span: {
                k: statistics.median(float(r[k]) for r in rows) for k in ("s", "cpu_s", "rss_mb")
            }
            for span, rows in by_span.items()
        }
        pairs = list(zip(by_span["steps"], by_span["all"], strict=True))
        extra = [float(a["s"]) / float(b["s"]) - 1 for a, b in pairs]
        cpu = [float(a["cpu_s"]) / float(b["cpu_s"]) - 1 for a, b in pairs]
        checkouts[name] = {
            "repo": str(repos[name]),
            "median": median,
            "extra_share_median": round(statistics.median(extra), 3),
            "extra_cpu_share_median": round(statistics.median(cpu), 3),
            "extra_share_per_round": [round(x, 3) for x in extra],
            "runs": by_span,
        }
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--slices", type=int, default=1_000_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/folded_span"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--mode", default="merge")
    ap.add_argument(
        "--repo",
        action="append",
        default=[],
        metavar="NAME=CHECKOUT",
        help="a checkout to run (default: this one, as 'this')",
    )
    args = ap.parse_args()
    repos = {
        name: Path(path).resolve()
        for name, path in (r.split("=", 1) for r in args.repo or [f"this={REPO}"])
    }
    trace = args.trace or built_trace(args.work, args.slices)
    args.work.mkdir(parents=True, exist_ok=True)
    result = measure(trace, args.rounds, args.mode, args.work, repos)
    result |= {"machine": platform.node(), "cpus": len(os.sched_getaffinity(0))}
    rows = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    rows.append(result)
    RESULTS.write_text(json.dumps(rows, indent=1) + "\n")
    for name, row in checkouts_of(result).items():
        m, c = row["median"], row
        print(
            f"{name}: folded --mode {args.mode} --no-cache, median of {args.rounds}: "
            f"default span {m['steps']['s']} s (CPU {m['steps']['cpu_s']} s), --span all "
            f"{m['all']['s']} s (CPU {m['all']['cpu_s']} s); the span costs "
            f"{100 * c['extra_share_median']:.0f}% more wall time, "
            f"{100 * c['extra_cpu_share_median']:.0f}% more CPU time"
        )


def checkouts_of(result: dict[str, object]) -> dict[str, dict]:
    checkouts = result["checkouts"]
    assert isinstance(checkouts, dict)
    return checkouts


if __name__ == "__main__":
    main()
