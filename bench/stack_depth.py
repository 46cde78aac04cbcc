"""How CPU stacks read with and without CPython's own frames, on any trace.

    python3 bench/stack_depth.py TRACE [--json OUT]

Prints: CPU samples; median folded depth (frames per sample, thread root excluded) with
every frame and as `folded`/`flamegraph`/`report` show them (the interpreter's frames
between two Python frames hidden, exporters/folded/frames.py); how many samples and distinct
stacks have an interpreter frame between two Python frames in each view (0 expected in the
default one); and the top 5 functions by total share (report's "Top functions").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collector import frames as predicates  # noqa: E402
from collector.frames import FrameRef, apply_filters  # noqa: E402
from exporters.folded.folded import load_stack_tables  # noqa: E402
from exporters.folded.frames import folded_frames  # noqa: E402
from exporters.perfetto.engine.trace_processor import open_trace  # noqa: E402
from exporters.report.top_functions import rank_functions  # noqa: E402


def interpreter_between_python(frames: list[FrameRef]) -> bool:
    python_at = [i for i, f in enumerate(frames) if predicates.is_python_frame(*f)]
    if len(python_at) < 2:
        return False
    return any(
        predicates.is_interpreter_frame(*f) and not predicates.is_python_frame(*f)
        for f in frames[python_at[0] + 1 : python_at[-1]]
    )


def measure(trace_path: Path) -> dict[str, object]:
    with open_trace(trace_path) as trace:
        load_stack_tables(trace, None)
        rows = [
            (r["stack"], r["modules"], int(r["samples"]))
            for r in trace.query("select stack, modules, samples from xpu_folded_cpu")
        ]
    out: dict[str, object] = {"trace": str(trace_path), "samples": sum(n for *_, n in rows)}
    for view, show_all in (("all_frames", True), ("default", False)):
        depths: list[int] = []
        bad_samples = bad_stacks = 0
        for stack, modules, n in rows:
            frames = apply_filters(folded_frames(stack, modules), show_all=show_all)[1:]
            depths.extend([len(frames)] * n)
            if interpreter_between_python(frames):
                bad_samples += n
                bad_stacks += 1
        out[view] = {
            "median_depth": statistics.median(depths) if depths else 0,
            "samples_with_interpreter_between_python": bad_samples,
            "stacks_with_interpreter_between_python": bad_stacks,
        }
    out["top_functions_by_total"] = [
        {k: r[k] for k in ("function", "thread", "self_pct", "total_pct")}
        for r in sorted(rank_functions(rows), key=lambda r: -r["total_pct"])[:5]  # type: ignore[operator]
    ]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path)
    p.add_argument("--json", type=Path, help="also write the numbers here")
    args = p.parse_args()
    m = measure(args.trace)
    print(f"{m['trace']}: {m['samples']} CPU samples")
    print(
        f"{'view':<12} {'median depth':>12} {'samples w/ interp. between Python':>34} {'stacks':>7}"
    )
    for view in ("all_frames", "default"):
        v = m[view]
        assert isinstance(v, dict)
        print(
            f"{view:<12} {v['median_depth']:>12} "
            f"{v['samples_with_interpreter_between_python']:>34} "
            f"{v['stacks_with_interpreter_between_python']:>7}"
        )
    print("top functions by total share:")
    for r in m["top_functions_by_total"]:  # type: ignore[attr-defined]
        print(
            f"  {r['total_pct']:6.1f}% total {r['self_pct']:6.1f}% self  "
            f"{r['function']}  [{r['thread']}]"
        )
    if args.json:
        args.json.write_text(json.dumps(m, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
