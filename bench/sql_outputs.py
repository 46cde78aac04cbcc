"""The readers' outputs on a set of traces, as digests, and the report's time: the check that
a change to how SQL is loaded (exporters/perfetto/engine/sql_modules.py) changed no answer.

    PYTHONPATH=$PWD python bench/sql_outputs.py --out bench/results/sql_outputs.json \
        [--baseline /path/to/other/checkout]

Traces: every Kineto JSON of bench/data converted, the synthetic scenarios of
tests/analysis_traces.py and tests/chain_traces.py, and a GPU-counter trace
(tests/test_gpu_metrics.py).  Outputs per trace, each run by `xpu-perf` with --no-cache in one
interpreter per checkout: `report --format json` (default span and --span all),
`report --ranks --format json`, `folded` in every mode, `query --format json` of the steps and
gaps, and a dump of every xpu_* view and table the analysis loads for a user's SQL (names and
rows).  With --baseline, the same outputs from the other checkout (its own code on
PYTHONPATH), then the report of the converted example timed under both, alternating, the
median of 5 each; the digests must match.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable

COMMANDS: dict[str, list[str]] = {
    "report_json": ["report", "{trace}", "--format", "json"],
    "report_json_all": ["report", "{trace}", "--format", "json", "--span", "all"],
    "report_ranks": ["report", "{trace}", "--ranks", "--format", "json"],
    "report_ranks_quote": ["report", "{trace}", "--ranks", "--steps", "it's*", "--format", "json"],
    "report_steps": ["report", "{trace}", "--format", "json", "--steps", "Profiler*"],
    "folded_merge": ["folded", "{trace}", "--mode", "merge"],
    "folded_gpu": ["folded", "{trace}", "--mode", "gpu"],
    "folded_cpu": ["folded", "{trace}", "--mode", "cpu", "--unit", "samples"],
    "folded_idle": ["folded", "{trace}", "--mode", "idle"],
    "folded_all": ["folded", "{trace}", "--span", "all"],
    "query_steps": ["query", "{trace}", "select * from xpu_step", "--format", "json"],
    "query_gaps": ["query", "{trace}", "select * from xpu_gpu_gap", "--format", "json"],
}

# Run in a child whose PYTHONPATH is one checkout: every command's output (and exit code)
# and the dump of every xpu_* relation, as digests.
_CHILD = r"""
import contextlib, hashlib, io, json, os, sys
from collector.cli import main
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
from exporters.analysis.analyze import load_for_query

commands, traces = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out = {}
for trace in traces:
    got = {}
    for key, argv in commands.items():
        buf, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(err):
            try:
                code = main([a.replace("{trace}", trace) for a in argv])
            except SystemExit as exc:
                code = exc.code
        # The traces' folder is a fresh temporary one: named alike, the digests of two runs
        # compare.
        where = os.path.dirname(trace)
        text, said = (s.getvalue().replace(where, "{dir}") for s in (buf, err))
        got[key] = [code, hashlib.sha256(text.encode()).hexdigest(), len(text), said]
    with open_trace(trace) as t:
        load_views(t)
        load_for_query(t)
        names = [r["name"] for r in t.query(
            "select name from sqlite_master where name glob 'xpu_*' or name glob '_xpu_*' "
            "order by name")]
        for name in names:
            cols, rows = t.query_columns(f"select * from {name}")
            dump = repr((cols, rows)).replace(os.path.dirname(trace), "{dir}")
            got["rel:" + name] = hashlib.sha256(dump.encode()).hexdigest()
    out[os.path.basename(trace)] = got
print(json.dumps(out))
"""


def make_traces(where: Path) -> list[Path]:
    """The inputs, written with this checkout's converter and writer."""
    sys.path.insert(0, str(ROOT))
    from collector.cli import main
    from tests import analysis_traces, chain_traces
    from tests import test_analysis_chain as chain_cases
    from tests import test_gpu_metrics as gm

    traces = []
    for src in sorted((ROOT / "bench" / "data").glob("*.json.gz")):
        out = where / (src.name.removesuffix(".json.gz") + ".perfetto-trace")
        # The trace keeps its command line (metadata): one that names no temporary path
        # keeps the digests of two runs comparable.
        sys.argv = ["xpu-perf", "convert", src.name]
        if main(["convert", str(src), "-o", str(out), "-q"]) != 0:
            raise SystemExit(f"convert failed: {src}")
        traces.append(out)
    for scenario in ("sync", "data", "host", "launch_bound", "gpu_bound"):
        out = where / f"scenario_{scenario}.perfetto-trace"
        analysis_traces.write(out, scenario)
        traces.append(out)
    out = where / "chain_wait.perfetto-trace"
    chain_traces.write(
        out,
        [
            chain_traces.Part("samples", 1_000_000, chain_cases.HOST_STACK),
            chain_traces.Part("wait", 3_000_000, chain_cases.QUEUE_STACK, "futex"),
        ],
        ["host_compute", "wait"],
    )
    traces.append(out)
    out = where / "chain_sync.perfetto-trace"
    chain_traces.write(
        out,
        [
            chain_traces.Part("block", 10_000, chain_cases.SYNC_STACK, "cudaStreamSynchronize"),
            chain_traces.Part("samples", 2_000_000, chain_cases.HOST_STACK),
        ],
        ["sync", "host_compute"],
    )
    traces.append(out)
    out = where / "gpu_metrics.perfetto-trace"
    gm.write(
        out,
        gm.sampled(gm.FakeGpu(phases=gm.PHASES)),
        [("gemm_bf16", 250, 350), ("vector_add", 450, 550), ("straddle", 395, 415)],
    )
    traces.append(out)
    return traces


def _env(root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(root), "XPU_PERF_NO_CACHE": "1"}


def outputs(root: Path, traces: list[Path]) -> dict[str, dict[str, object]]:
    done = subprocess.run(
        [PYTHON, "-c", _CHILD, json.dumps(COMMANDS), json.dumps([str(t) for t in traces])],
        env=_env(root),
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"outputs under {root} failed:\n{done.stderr[-3000:]}")
    result: dict[str, dict[str, object]] = json.loads(done.stdout.splitlines()[-1])
    return result


def report_seconds(root: Path, trace: Path) -> float:
    start = time.perf_counter()
    subprocess.run(
        [PYTHON, "-m", "collector.cli", "report", str(trace), "--format", "json"],
        env=_env(root),
        cwd=root,
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--baseline", type=Path, help="another checkout to compare with")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        traces = make_traces(Path(tmp))
        this = outputs(ROOT, traces)
        result: dict[str, object] = {"outputs": this}
        if args.baseline is not None:
            base = outputs(args.baseline.resolve(), traces)
            differ = sorted(
                f"{trace}:{key}"
                for trace in set(this) | set(base)
                for key in set(this.get(trace, {})) | set(base.get(trace, {}))
                if this.get(trace, {}).get(key) != base.get(trace, {}).get(key)
            )
            example = next(t for t in traces if t.name.startswith("example_kineto"))
            times: dict[str, list[float]] = {"baseline": [], "this": []}
            for _ in range(args.repeat):
                times["baseline"].append(report_seconds(args.baseline.resolve(), example))
                times["this"].append(report_seconds(ROOT, example))
            result["differ"] = differ
            result["report_s"] = {
                k: {"median": statistics.median(v), "runs": v} for k, v in times.items()
            }
            print(f"outputs compared: {sum(len(v) for v in this.values())}, differ: {differ}")
            print(
                "report of the converted example, median of "
                f"{args.repeat}: baseline {statistics.median(times['baseline']):.3f} s, "
                f"this {statistics.median(times['this']):.3f} s"
            )
        digest = hashlib.sha256(json.dumps(this, sort_keys=True).encode()).hexdigest()
        result["digest"] = digest
        print(f"all outputs: {digest}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return 1 if result.get("differ") else 0


if __name__ == "__main__":
    raise SystemExit(main())
