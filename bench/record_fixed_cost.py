"""record's fixed cost: the wall time `xpu-perf record` adds to a program's own, start and finish.

    [sudo] .venv/bin/python bench/record_fixed_cost.py [--rounds 5] [--python /usr/bin/python3]

Two programs: a trivial one (`python3 -c pass`) and a ~5 s one (a Python loop that runs until
5 s of wall time have passed, so its own wall time does not depend on the load), each run bare
and under `record` with everything on (the default options; as root these include the eBPF
kernel-mode sampler beside the in-process one), and as root also under `record --cpu-sampler
ebpf` and `record --no-kernel-stacks` (the sources a user without root gets).  The runs are
interleaved, round after round (bare, record, ..., then again), so drifts
in the machine's load hit every variant alike; the table gives medians, and the fixed cost is
the median record wall time minus the median bare wall time.  The machine's load average is
printed beside the table (a shared VM's numbers are only as steady as its load).

`--python`: the interpreter run as the program; by default the first `python3` that is a real
binary (a pyenv shim is a shell script whose ~40 processes would be measured too).

`--program NAME=COMMAND`: measure COMMAND (split as a shell would) instead of the two Python
programs, e.g. a trivial CUDA program on a GPU machine; repeatable.

`--compare NAME=DIR`: also run record from another checkout (e.g. main's, before a change),
interleaved with this one's in the same rounds: its variants are named `NAME: record...`.

Writes bench/results/record_fixed_cost.json (or --json) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOOP_S = 5.0
PROGRAMS = {
    "trivial": ["-c", "pass"],
    "5 s loop": [
        "-c",
        f"import time\nend = time.monotonic() + {LOOP_S}\nwhile time.monotonic() < end:\n    pass",
    ],
}


def real_python() -> str:
    """A python3 that is an ELF binary, not a shim script."""
    candidates = [shutil.which("python3"), "/usr/bin/python3", sys.executable]
    for path in candidates:
        if path and Path(path).is_file():
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    return path
    return sys.executable


def variants(is_root: bool) -> dict[str, list[str] | None]:
    """Name -> record's extra options (None: the program bare)."""
    out: dict[str, list[str] | None] = {"bare": None, "record": []}
    if is_root and importlib.util.find_spec("bcc") is not None:
        # The sources a user without root gets (no eBPF); the venv of this VM lives under
        # /root, so another user cannot run it here.
        out["record --no-kernel-stacks"] = ["--no-kernel-stacks"]
        out["record --cpu-sampler ebpf"] = ["--cpu-sampler", "ebpf"]
    return out


def timed(cmd: list[str], repo: Path = REPO) -> tuple[float, int]:
    """The command's wall time and exit status (a recording whose target crashed is timed
    and counted, not the end of the benchmark)."""
    # The checkout first, then whatever the caller's path holds (the GPU machine's carried
    # dependencies are on it).
    path = [str(repo), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, env=env)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        print(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-300:]}", file=sys.stderr)
    return wall, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--python", default=real_python(), help="the program's interpreter")
    parser.add_argument("--label", default="", help="a name for this run in the JSON")
    parser.add_argument(
        "--program", action="append", default=[], metavar="NAME=COMMAND", help="a program"
    )
    parser.add_argument(
        "--compare", action="append", default=[], metavar="NAME=DIR", help="another checkout"
    )
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=OPTIONS",
        help="record with these options (repeatable; replaces the default variants): where "
        "the fixed cost goes, e.g. 'no metrics=--no-gpu-metrics'",
    )
    parser.add_argument(
        "--json", type=Path, default=REPO / "bench" / "results" / "record_fixed_cost.json"
    )
    args = parser.parse_args()
    is_root = os.geteuid() == 0
    chosen = variants(is_root)
    if args.variant:
        chosen = {"bare": None}
        for item in args.variant:
            name, _, options = item.partition("=")
            chosen[name] = shlex.split(options)
    programs = {name: [args.python, *argv] for name, argv in PROGRAMS.items()}
    if args.program:
        programs = {}
        for item in args.program:
            name, _, command = item.partition("=")
            programs[name] = shlex.split(command)
    repos = {"": REPO}
    for item in args.compare:
        name, _, directory = item.partition("=")
        repos[f"{name}: "] = Path(directory).resolve()
    env_python = [sys.executable, "-m", "collector.cli", "record", "-q"]
    walls: dict[tuple[str, str], list[float]] = {}
    failed: dict[tuple[str, str], int] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="xpu-perf-fixed-cost-") as tmp:
        trace = Path(tmp) / "t.perfetto-trace"
        for _ in range(args.rounds):
            for program, target in programs.items():
                for prefix, repo in repos.items():
                    for name, extra in chosen.items():
                        if extra is None and prefix:
                            continue  # the bare program once per round
                        if extra is None:
                            cmd = target
                        else:
                            cmd = [*env_python, *extra, "-o", str(trace), "--", *target]
                        wall, status = timed(cmd, repo)
                        if extra is None and status != 0:
                            raise SystemExit(f"the program itself failed ({status}): {target}")
                        walls.setdefault((program, prefix + name), []).append(wall)
                        key = (program, prefix + name)
                        failed[key] = failed.get(key, 0) + (status != 0)
    load_after = os.getloadavg()
    rows = []
    for program in programs:
        bare = statistics.median(walls[(program, "bare")])
        names = [p + n for p in repos for n in chosen if not (p and n == "bare")]
        for name in names:
            median = statistics.median(walls[(program, name)])
            rows.append(
                {
                    "program": program,
                    "variant": name,
                    "median_s": round(median, 3),
                    "fixed_cost_s": round(median - bare, 3) if name != "bare" else 0.0,
                    "walls_s": [round(w, 3) for w in walls[(program, name)]],
                    "runs_failed": failed.get((program, name), 0),
                }
            )
    result = {
        "label": args.label,
        "root": is_root,
        "rounds": args.rounds,
        "python": args.python,
        "cpus": os.cpu_count(),
        "load_average_1min": [round(load_before[0], 2), round(load_after[0], 2)],
        "rows": rows,
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    previous = json.loads(args.json.read_text()) if args.json.exists() else {}
    runs = previous.get("runs", []) if isinstance(previous, dict) else []
    runs = [r for r in runs if r.get("label") != args.label] + [result]
    args.json.write_text(json.dumps({"runs": runs}, indent=1) + "\n")
    print(
        f"{args.rounds} interleaved rounds, root={is_root}, {os.cpu_count()} CPUs, load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    print("| program | variant | median wall (s) | fixed cost (s) | runs failed |")
    print("|---|---|---:|---:|---:|")
    for row in rows:
        cost = "" if row["variant"] == "bare" else f"{row['fixed_cost_s']:.2f}"
        print(
            f"| {row['program']} | {row['variant']} | {row['median_s']:.2f} | {cost} "
            f"| {row['runs_failed']} of {args.rounds} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
