"""Checks the answers suite's traces (bench/answers_gpu.sh): for each program, the top finding
and the line it names against the cause written in bench/workloads/idle_causes.py (`# CAUSE:`),
the detected steps against the loop's count, and the control without an idle finding.
Prints the table and writes bench/results/answers_h100.json.

    python3 bench/answers_report.py TRACES.tgz|DIR"""

from __future__ import annotations

import ast
import json
import re
import sys
import tarfile
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "bench" / "workloads" / "idle_causes.py"
sys.path.insert(0, str(REPO))

from exporters.analysis.analyze import analyze  # noqa: E402
from exporters.perfetto.engine.trace_processor import open_trace  # noqa: E402

EXPECTED = {
    "sync": "HOST_SYNC",
    "dataloader": "INPUT_PIPELINE",
    "preprocess": "PYTHON_BETWEEN_LAUNCHES",
    "pageable": "PAGEABLE_COPY",
    "launch_bound": "LAUNCH_BOUND",
    "fp32_gemm": "FP32_GEMM",
    "gpu_bound": None,
    # issue 37 (the waits of `record` needed for loader_workers and producer_thread)
    "loader_workers": "INPUT_PIPELINE",
    "infer_preprocess": "HOST_SYNC",
    "sync_then_prep": "HOST_SYNC",
    "producer_thread": "BLOCKED_WAIT",
    "file_reads": "PYTHON_BETWEEN_LAUNCHES|BLOCKED_WAIT",
    "nvtx_steps": "PYTHON_BETWEEN_LAUNCHES",
    "cuda_graph": "PYTHON_BETWEEN_LAUNCHES",
}
IDLE_CODES = {
    "HOST_SYNC",
    "INPUT_PIPELINE",
    "PYTHON_BETWEEN_LAUNCHES",
    "LAUNCH_BOUND",
    "BLOCKED_WAIT",
}
# Where a finding's location must point: the cause's line, or (samples land on any line of
# the function) the function whose `def` carries the marker.
BY_FUNCTION = {
    "dataloader",
    "preprocess",
    "loader_workers",
    "infer_preprocess",
    "sync_then_prep",
    "nvtx_steps",
    "cuda_graph",
}


def loop_steps() -> dict[str, int]:
    """STEPS of the programs, read without importing torch."""
    tree = ast.parse(PROGRAMS.read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "STEPS":
            return ast.literal_eval(node.value)
    raise SystemExit(f"no STEPS in {PROGRAMS}")


STEPS = loop_steps()
# Programs whose cause is another program's function (the same preprocessing, in NVTX ranges
# or between graph replays).
LOCATED_AT = {"nvtx_steps": "preprocess", "cuda_graph": "preprocess"}


def cause_sites() -> dict[str, tuple[int, str]]:
    src = PROGRAMS.read_text().splitlines()
    sites = {}
    for i, line in enumerate(src, 1):
        m = re.search(r"# CAUSE:(\w+)", line)
        if m:
            fn = re.match(r"\s*def (\w+)", line)
            sites[m[1]] = (i, fn[1] if fn else "")
    return sites


def main() -> int:
    src = Path(sys.argv[1])
    if src.is_file():
        tmp = Path(tempfile.mkdtemp())
        with tarfile.open(src) as tar:
            tar.extractall(tmp, filter="data")
        src = tmp
    sites = cause_sites()
    rows = []
    for mode, code in EXPECTED.items():
        path = src / f"{mode}.perfetto-trace"
        with open_trace(path) as t:
            a = analyze(t)
        top = a.findings[0] if a.findings else None
        where = top.locations[0] if top and top.locations else ""
        line, func = sites.get(LOCATED_AT.get(mode, mode), (0, ""))
        if code is None:
            located = True
        elif mode in BY_FUNCTION:
            located = any(
                loc.startswith(f"{func} (") or f".{func} (" in loc
                for loc in (top.locations if top else [])
            )
        else:
            located = any(
                f"({PROGRAMS.name}:{line})" in loc for loc in (top.locations if top else [])
            )
        steps_ok = abs(a.steps.count - STEPS[mode]) <= 1
        ok = (
            (top.code if top else None) in (code or "").split("|")
            if code is not None and code not in ("FP32_GEMM", "PAGEABLE_COPY")
            else (code is None and not any(f.code in IDLE_CODES for f in a.findings))
            or (code is not None and top is not None and top.code == code)
        )
        rows.append(
            {
                "program": mode,
                "expected": code or "no idle finding",
                "got": [f.code for f in a.findings],
                "top_share": round(top.share, 3) if top else 0.0,
                "where": where,
                "expected_where": f"{func or 'line'} ({PROGRAMS.name}:{line})" if code else "",
                "located": located,
                "steps_true": STEPS[mode],
                "steps_found": a.steps.count,
                "step_source": a.steps.source,
                "gpu_busy_pct": round(100 * a.span.busy_ns / max(1, a.span.dur), 1),
                # the share of the steady state's idle time under a named cause (goal 90%)
                "named_idle_share": round(
                    1 - a.idle.by_class.get("other", 0) / max(1, a.idle.idle_ns), 3
                ),
                "top_explains": round(top.idle_ns / max(1, a.idle.idle_ns), 3) if top else 0.0,
                "span_ms": round(a.span.dur / 1e6, 1),
                "ok": bool(ok and located and steps_ok),
            }
        )
    head = ("program", "expected", "got", "where", "steps", "busy%", "named idle", "ok")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for r in rows:
        got = ", ".join(f"{c}" for c in r["got"]) or "none"
        print(
            f"| {r['program']} | {r['expected']} | {got} | {r['where'] or '-'} | "
            f"{r['steps_found']}/{r['steps_true']} | {r['gpu_busy_pct']} | "
            f"{100 * r['named_idle_share']:.0f}% | "
            f"{'yes' if r['ok'] else 'NO'} |"
        )
    out = REPO / "bench/results/answers_h100.json"
    out.write_text(json.dumps(rows, indent=1) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
