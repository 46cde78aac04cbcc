"""`convert` and `record --from-streams` of several checkouts, interleaved: how a change of
the writer's slice paths moves the time of the commands that write traces.

    python bench/writer_paths.py --checkout before=/tmp/before --checkout after=. \
        --rounds 5 [--out bench/results/writer_paths.json]

Cases: `convert` of bench/data/example_kineto.json.gz; `record --from-streams` of the kept
recording tests/data/golden_recording (the fake CUPTI's run: CUDA API calls and GPU ops,
CPU samples, wait slices) and of a kept recording made of
bench/data/cupti_streams/launch_bound.xpstream (12k GPU ops and API calls); and the wait
slices of a CPU stream with 200k WAIT rows (`waits 200k`: the CPU source's WAIT table,
synthetic, through InprocessCpuSource._waits and one producer; the process's time with
its imports).
Per round, each case runs once in every checkout, the checkouts' order rotated every round
(the VM is shared: a neighbour's burst should not always land on the same one), each run a
process of its own (wall and CPU time, peak RSS: bench/measured.py) through
tests/golden_digests.py's runner, whose fixed command line and clock snapshot make the
checkouts' traces comparable byte for byte (reported: `same_bytes`).  Medians on stdout and
in --out.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from measured import run_measured

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "bench" / "data" / "example_kineto.json.gz"
GOLDEN = REPO / "tests" / "data" / "golden_recording"
LAUNCH_BOUND = REPO / "bench" / "data" / "cupti_streams" / "launch_bound.xpstream"
RUNNER = REPO / "tests" / "golden_digests.py"
OUT = "out.perfetto-trace"


def kept_launch_bound(directory: Path) -> Path:
    """A kept recording of the launch_bound CUPTI stream: its manifest and the stream."""
    (directory / "cupti").mkdir(parents=True, mode=0o700)
    shutil.copyfile(LAUNCH_BOUND, directory / "cupti" / "cupti-1.xpstream")
    manifest = {"command_line": ["xpu-perf", "record", "--", "python", "launch_bound.py"]}
    (directory / "manifest.json").write_text(json.dumps({**manifest, "version": 1}))
    return directory


def prepare(case: str, work: Path, kept: dict[str, Path]) -> list[str]:
    """The command line of `case` in `work` (its inputs copied there: record removes them)."""
    out = OUT
    if case == "waits 200k":
        return ["waits"]
    if case == "convert example_kineto":
        shutil.copyfile(EXAMPLE, work / EXAMPLE.name)
        return ["convert", EXAMPLE.name, "-o", out, "-q", "--no-progress"]
    source = kept[case.split()[-1]]
    shutil.copytree(source, work / "kept")
    for path in [work / "kept", *(work / "kept").rglob("*")]:
        path.chmod(0o700 if path.is_dir() else 0o600)
    return ["record", "--from-streams", "kept", "-o", out, "-q"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkout", action="append", required=True, help="NAME=DIR")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    checkouts = dict(c.split("=", 1) for c in args.checkout)
    names = list(checkouts)
    cases = [
        "convert example_kineto",
        "record golden_recording",
        "record launch_bound",
        "waits 200k",
    ]
    rows: dict[str, dict[str, list[dict[str, float]]]] = {c: {n: [] for n in names} for c in cases}
    same: dict[str, bool] = {}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        kept = {"golden_recording": GOLDEN, "launch_bound": kept_launch_bound(tmp / "lb")}
        for r in range(args.rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for case in cases:
                traces = {}
                for name in order:
                    work = tmp / f"{r}-{case.replace(' ', '-')}-{name}"
                    work.mkdir()
                    argv = prepare(case, work, kept)
                    checkout = Path(checkouts[name]).resolve()
                    cmd = [sys.executable, "-c", _IN_CHECKOUT, str(checkout), str(RUNNER), *argv]
                    row, _, _ = run_measured(cmd, cwd=work, env=env, digits=3)
                    rows[case][name].append(row)
                    traces[name] = work / OUT
                first = traces[names[0]]
                same[case] = same.get(case, True) and all(
                    filecmp.cmp(first, t, shallow=False) for t in traces.values()
                )
                print(f"round {r + 1} {case}: " + ", ".join(
                    f"{n} {rows[case][n][-1]['s']:.3f} s" for n in names
                ), file=sys.stderr)  # fmt: skip
    medians = {
        case: {
            name: {k: statistics.median(row[k] for row in runs) for k in ("s", "cpu_s", "rss_mb")}
            for name, runs in by_name.items()
        }
        for case, by_name in rows.items()
    }
    result = {
        "rounds": args.rounds,
        "checkouts": checkouts,
        "median": medians,
        "same_bytes": same,
        "runs": rows,
    }
    for case, by_name in medians.items():
        cells = ", ".join(f"{n} {m['s']:.3f} s (cpu {m['cpu_s']:.3f})" for n, m in by_name.items())
        print(f"{case}: {cells}; same bytes: {same[case]}")
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


# Runs the checkout's own code (its directory first on sys.path) through the golden
# digests' runner (a fixed command line and clock snapshot), or writes the wait slices of
# a synthetic WAIT table (8 threads, 4 calls, 64 stacks at entry).
_IN_CHECKOUT = """
import runpy, sys
checkout, runner = sys.argv[1], sys.argv[2]
sys.path.insert(0, checkout)
if sys.argv[3:] == ["waits"]:
    from array import array
    from collections import Counter
    from collector import model
    from collector.sources.cpu_stream import InprocessCpuSource
    from exporters.perfetto.writer import TraceWriter
    n = 200_000
    columns = {
        "tid": array("q", (100 + i % 8 for i in range(n))),
        "start": array("q", (1_000_000 + 5_000 * i for i in range(n))),
        "duration": array("q", (2_000 + i % 1_000 for i in range(n))),
        "call_id": array("q", (i % 4 for i in range(n))),
        "stack_id": array("q", (i % 64 for i in range(n))),
    }
    class Table(dict):
        rows = n
    class Stream:
        def table(self, name):
            return Table(columns)
    strings = dict(enumerate(("poll", "futex", "read", "epoll_wait")))
    stacks = {
        k: model.Stack(tuple(model.Frame(f"f{k}_{d}", "/lib/x.so", d) for d in range(12)))
        for k in range(64)
    }
    source = InprocessCpuSource.__new__(InprocessCpuSource)
    source.counts = Counter()
    with TraceWriter("out.perfetto-trace", command_line=("waits",)) as w:
        w.producer("cpu").write_all(source._waits(Stream(), 10, strings, stacks))
    sys.exit(0)
sys.argv = [runner, "--run", *sys.argv[3:]]
runpy.run_path(runner, run_name="__main__")
"""


if __name__ == "__main__":
    main()
