"""Reads what bench/indirect_gpu.sh brought back (issue 37): for each program, `report`'s top
finding (code, title, first location), the share of the analysed idle it explains, the share
of idle under any named cause (not "other"), the steps found and how; beside it
HolisticTraceAnalysis's idle breakdown of the same program's Kineto trace, where a Python
with HTA is given (HTA names no cause; its host_wait / kernel_wait / other split is its
answer).  Prints the table, writes bench/results/indirect_h200.json.

    python3 bench/indirect_report.py TGZ|DIR [TGZ|DIR...] [--hta PYTHON]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# What a user should be told, per program: the cause and where (the `# CAUSE:` line's
# function or the straggling rank).
EXPECTED = {
    "slow_workers": "input pipeline: the DataLoader workers' __getitem__ (SlowSamples)",
    "infer_vocab": "host work between requests: tokenize_vocab(), not the needed .cpu()",
    "sync_then_cpu": "the logging sync, naming next_inputs() that runs after it",
    "producer_lists": "blocked on the queue fed by produce_lists() (the producer thread)",
    "jsonl_reads": "host work/reads in the loop: the json.loads line",
    "nvtx_sync_steps": "25 steps from the NVTX ranges; the logging sync (.item())",
    "gpt2": "launch-bound: the model's own small ops, located at its modules",
    "ddp_host": "straggler rank 1 (host_work), rank 0 waits in NCCL",
    "ddp_gpu": "straggler rank 1 (bigger batch: its GPU compute), rank 0 waits",
}

HTA_SCRIPT = """
import json, sys
from hta.trace_analysis import TraceAnalysis
out = {}
try:
    ta = TraceAnalysis(trace_dir=sys.argv[1])
    df = ta.get_idle_time_breakdown(visualize=False)[0]
    rows = df.to_dict("records")
    total = {}
    for r in rows:
        total[r["idle_category"]] = total.get(r["idle_category"], 0) + r["idle_time"]
    whole = sum(total.values()) or 1
    out["idle"] = {k: round(v / whole, 3) for k, v in total.items()}
except Exception as exc:  # HTA's own failure is its answer too
    out["error"] = f"{type(exc).__name__}: {exc}"[:200]
print(json.dumps(out))
"""


def unpack(paths: list[str]) -> Path:
    root = Path(tempfile.mkdtemp(prefix="indirect-"))
    for p in map(Path, paths):
        if p.is_dir():
            for f in p.iterdir():
                (root / f.name).symlink_to(f.resolve())
        else:
            with tarfile.open(p) as tar:
                tar.extractall(root, filter="data")
    return root


def report(trace: Path, *flags: str) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "report", str(trace), "--format", "json", *flags],
        capture_output=True,
        text=True,
        cwd=REPO,
    )
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1:] or ["failed"]}
    return json.loads(proc.stdout)


def hta(python: str, kineto: Path) -> dict:
    with tempfile.TemporaryDirectory() as d:
        # HTA reads every trace in the folder as one rank each.
        (Path(d) / "rank0.json.gz").symlink_to(kineto.resolve())
        proc = subprocess.run(
            [python, "-c", HTA_SCRIPT, d], capture_output=True, text=True, timeout=900
        )
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:200]}


def summarise(got: dict) -> dict:
    if "error" in got:
        return {"top": f"error: {got['error']}"}
    findings = got.get("findings") or []
    idle = got.get("idle") or {}
    top = findings[0] if findings else {}
    total = idle.get("idle_ns") or 0
    other = (idle.get("by_class_ns") or {}).get("other", 0)
    return {
        "top": f"{top.get('code', '-')}: {top.get('title', 'no finding')}",
        "where": (top.get("locations") or ["-"])[0],
        "share_of_span": top.get("share"),
        "explained_idle": round(1 - other / total, 3) if total else None,
        "steps": f"{got.get('steps_total', '?')} ({got.get('step_source', '?')})",
        "suggestion": top.get("suggestion", ""),
        "ranks": got.get("ranks"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--hta", help="a Python with HolisticTraceAnalysis installed")
    args = ap.parse_args()
    root = unpack(args.inputs)
    rows = []
    for trace in sorted(root.glob("*.perfetto-trace")):
        name = trace.name.removesuffix(".perfetto-trace")
        row = {"program": name, "expected": EXPECTED.get(name, "?")}
        row |= summarise(report(trace))
        if name.startswith("ddp"):
            ranks = report(trace, "--ranks")
            rows_of = ranks if isinstance(ranks, list) else []
            row["ranks_verdict"] = next((r["verdict"] for r in rows_of if r.get("verdict")), None)
        kineto = root / f"{name}.kineto.json.gz"
        if args.hta and kineto.exists():
            row["hta"] = hta(args.hta, kineto)
        rows.append(row)
    print(f"{'program':18} {'top finding':60} {'explained':>9}  steps")
    for r in rows:
        explained = r.get("explained_idle")
        print(
            f"{r['program']:18} {r['top'][:60]:60} "
            f"{'' if explained is None else f'{explained:.0%}':>9}  {r.get('steps', '')}"
        )
        print(f"{'':18} where: {r.get('where', '-')}; expected: {r['expected']}")
        if "hta" in r:
            print(f"{'':18} HTA: {r['hta']}")
        if r.get("ranks_verdict"):
            print(f"{'':18} ranks: {r['ranks_verdict']}")
    out = REPO / "bench" / "results" / "indirect_h200.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out.relative_to(REPO)}")


if __name__ == "__main__":
    main()
