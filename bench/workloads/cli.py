"""The `--steps/--warmup` command line every workload module shares."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def main(name: str, run: Callable[[int, int], float], default_steps: int = 50) -> None:
    parser = argparse.ArgumentParser(prog=f"python3 -m bench.workloads.{name}")
    parser.add_argument("--steps", type=int, default=default_steps, help="timed steps")
    parser.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    args = parser.parse_args()
    ms = run(args.steps, args.warmup)
    print(f"{name}: {ms:.3f} ms/step (median of {args.steps}, warmup {args.warmup})")
