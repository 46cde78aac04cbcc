"""Stack quality of a recorded trace's CPU samples (issue 11's criteria), through SQL.

    python bench/cpu_sampling_report.py TRACE SCRIPT_NAME [--json OUT]

- main-thread user-space samples (tid == pid, innermost frame not a kernel frame) that carry
  a frame of the script (a Python frame whose file name ends with SCRIPT_NAME);
- unresolved frames (`module+0x...` or a bare `0x...`) among all CPU-sample frames;
- stacks whose outermost frame below the process is a bare address (rooted at 0x0);
- samples by thread.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from exporters.perfetto.engine.trace_processor import open_trace  # noqa: E402
from exporters.perfetto.engine.views import load_views  # noqa: E402

_UNRESOLVED = re.compile(r"(\+0x[0-9a-f]+|^0x[0-9a-f]+)$")


def stack_quality(trace: Path, script: str) -> dict[str, object]:
    with open_trace(trace) as tp:
        load_views(tp)
        frames = {
            r["id"]: (r["parent_id"], r["name"] or "")
            for r in tp.query(
                "select c.id, c.parent_id, f.name from stack_profile_callsite c "
                "join stack_profile_frame f on f.id = c.frame_id"
            )
        }
        samples = tp.query(
            "select s.callsite_id, t.tid, p.pid, t.name as thread from xpu_cpu_sample s "
            "join thread t using (utid) left join process p using (upid)"
        )
    cache: dict[int, list[str]] = {}

    def stack(callsite: int | None) -> list[str]:  # innermost first
        if callsite is None:
            return []
        if callsite not in cache:
            parent, name = frames[callsite]
            cache[callsite] = [name, *stack(parent)]
        return cache[callsite]

    total_frames = unresolved = rooted_at_address = main_user = main_script = 0
    threads: Counter[str] = Counter()
    for s in samples:
        st = stack(s["callsite_id"])
        threads[s["thread"] or str(s["tid"])] += 1
        total_frames += len(st)
        unresolved += sum(1 for f in st if _UNRESOLVED.search(f))
        if st and re.fullmatch(r"0x[0-9a-f]+", st[-1]):
            rooted_at_address += 1
        if s["tid"] == s["pid"] and st and not st[0].startswith("[kernel]"):
            main_user += 1
            if any(f" ({script}:" in f or f.endswith(f"({script})") for f in st):
                main_script += 1
    return {
        "samples": len(samples),
        "main_thread_user_samples": main_user,
        "main_thread_with_script_frame_pct": round(100 * main_script / max(main_user, 1), 1),
        "frames": total_frames,
        "unresolved_frames_pct": round(100 * unresolved / max(total_frames, 1), 1),
        "stacks_rooted_at_address": rooted_at_address,
        "samples_by_thread": dict(threads.most_common(8)),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("trace", type=Path)
    parser.add_argument("script", help="file name of the script, e.g. launch_bound.py")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = stack_quality(args.trace, args.script)
    for key, value in result.items():
        print(f"{key}: {value}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
