"""Where record's fixed cost goes, phase by phase: a program run bare and under `record`,
with time stamps taken by the program itself and by a shell around it, so that each run's
wall time splits into

- start: record's own start, up to the target's first line of Python;
- import / work: the program's imports and its work (its first CUDA call initialises
  CUPTI under record);
- exit: from the program's last line to the end of its process (atexit, the injection's
  final flush, a PM sampling start still under way);
- finish: from the target's end to record's (the sources stopped, the trace written).

    python3 bench/record_phases.py [--rounds 3] [--variant NAME=FLAGS]... [--profile DIR]
        [--program 'import torch; torch.zeros(1, device="cuda")']

Bare and record runs are interleaved round after round; the table gives medians.
`--profile DIR`: one more record run under cProfile, its 40 heaviest functions (cumulative)
printed and the profile kept in DIR.  Writes bench/results/record_phases.json (or --json).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PHASES = ("start", "import", "work", "exit", "finish", "total")

# The target: the shell notes its own end after the program's process is gone.
TARGET = """
import time
with open({stamps!r}, "a") as f:
    f.write("first %.6f\\n" % time.time())
{imports}
with open({stamps!r}, "a") as f:
    f.write("imported %.6f\\n" % time.time())
{work}
with open({stamps!r}, "a") as f:
    f.write("worked %.6f\\n" % time.time())
"""


def target_command(python: str, imports: str, work: str, stamps: Path) -> list[str]:
    code = TARGET.format(stamps=str(stamps), imports=imports, work=work)
    shell = (
        f'{shlex.quote(python)} -c "$0"; rc=$?; echo "ended $(date +%s.%N)" >> {stamps}; exit $rc'
    )
    return ["sh", "-c", shell, code]


def phases(started: float, stamps: Path, finished: float) -> dict[str, float]:
    seen = dict(line.split() for line in stamps.read_text().splitlines())
    t = {name: float(value) for name, value in seen.items()}
    return {
        "start": t["first"] - started,
        "import": t["imported"] - t["first"],
        "work": t["worked"] - t["imported"],
        "exit": t["ended"] - t["worked"],
        "finish": finished - t["ended"],
        "total": finished - started,
    }


def run_once(
    prefix: list[str], python: str, imports: str, work: str, scratch: Path
) -> dict[str, float]:
    stamps = scratch / "stamps"
    stamps.unlink(missing_ok=True)
    command = [*prefix, *target_command(python, imports, work, stamps)]
    started = time.time()
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    finished = time.time()
    if done.returncode != 0 or "imported" not in (stamps.read_text() if stamps.exists() else ""):
        tail = (done.stderr or "").strip().splitlines()[-3:]
        raise SystemExit(f"{shlex.join(command[:6])}... exit {done.returncode}: {tail}")
    return phases(started, stamps, finished)


def record_prefix(out: Path, flags: str) -> list[str]:
    return [sys.executable, "-m", "collector.cli", "record", "-q", *shlex.split(flags), "-o",
            str(out), "--"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--python", default="python3")
    parser.add_argument("--imports", default="import torch")
    parser.add_argument("--work", default='torch.zeros(1, device="cuda")')
    parser.add_argument(
        "--variant", action="append", default=[], help="NAME=FLAGS for record (repeatable)"
    )
    parser.add_argument("--profile", type=Path, help="one record run under cProfile, kept here")
    parser.add_argument("--json", type=Path, default=REPO / "bench/results/record_phases.json")
    args = parser.parse_args()
    variants = {"bare": None, "record": ""}
    for item in args.variant:
        name, _, flags = item.partition("=")
        variants[name] = flags
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for _ in range(args.rounds):
            for name, flags in variants.items():
                prefix = [] if flags is None else record_prefix(scratch / "t.pftrace", flags)
                runs[name].append(run_once(prefix, args.python, args.imports, args.work, scratch))
        if args.profile:
            profile_record(args, scratch)
    table = {
        name: {p: statistics.median(r[p] for r in rs) for p in PHASES} for name, rs in runs.items()
    }
    print(f"| variant | {' | '.join(PHASES)} | total - bare |")
    print("|---|" + "---:|" * (len(PHASES) + 1))
    bare = table["bare"]["total"]
    for name, row in table.items():
        cells = " | ".join(f"{row[p]:.3f}" for p in PHASES)
        print(f"| {name} | {cells} | {row['total'] - bare:+.3f} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(
        json.dumps({"variants": variants, "runs": runs, "medians": table}, indent=1)
    )
    print(f"wrote {args.json}")


def profile_record(args: argparse.Namespace, scratch: Path) -> None:
    """One record run in this process under cProfile (the CLI's main, as the command runs it)."""
    from collector import cli

    args.profile.mkdir(parents=True, exist_ok=True)
    stamps = scratch / "stamps"
    stamps.unlink(missing_ok=True)
    argv = ["record", "-q", "-o", str(scratch / "p.pftrace"), "--",
            *target_command(args.python, args.imports, args.work, stamps)]  # fmt: skip
    profiler = cProfile.Profile()
    started = time.time()
    os.chdir(REPO)
    profiler.runcall(cli.main, argv)
    finished = time.time()
    path = args.profile / "record.prof"
    profiler.dump_stats(path)
    print("profiled run:", {k: round(v, 3) for k, v in phases(started, stamps, finished).items()})
    pstats.Stats(str(path)).sort_stats("cumulative").print_stats(40)


if __name__ == "__main__":
    main()
