"""xpu-perf's CPU samples side by side with perf --call-graph dwarf and py-spy, on the
programs of known call structure (two callers 3:1 of one leaf), on this machine.

    .venv/bin/python bench/cpu_sampling_vm.py [--rounds 3] [--seconds 3] [--json OUT]

For each program and tool, sampling at ~1 kHz: the heavy:light split (3 is right) and the
share of samples whose stack has root -> caller -> leaf (medians over rounds), and for
xpu-perf its own CPU time as a share of the program's (the programs burn a fixed amount of
CPU time, so a wall-clock comparison would not show it; perf and py-spy sample from another
process, whose cost is not measured here).  C built -O2 -g without frame pointers and -O1 -g with
them (tests/native/shrink_callers.c); pure Python on Debian's python3
(tests/native/two_callers.py).  perf needs `linux-perf` (Debian) and root or
perf_event_paranoid <= 1; py-spy the `py-spy` wheel.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
NATIVE = REPO / "tests" / "native"
XPU = [sys.executable, "-m", "collector.cli"]
_LINE = re.compile(r" \([^()]*:\d+\)")
OWN_PCT: list[float] = []


def folded_split(stacks: Counter[str], root: str) -> tuple[float, float]:
    heavy = sum(n for s, n in stacks.items() if re.search(rf"{root};heavy_caller;leaf\b", s))
    light = sum(n for s, n in stacks.items() if re.search(rf"{root};light_caller;leaf\b", s))
    total = sum(stacks.values()) or 1
    return heavy / max(light, 1), 100.0 * (heavy + light) / total


def run_timed(cmd: list[str], **kw: object) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - t0, proc


def xpu(cmd: list[str], tmp: Path) -> tuple[float, Counter[str]]:
    trace = tmp / "x.perfetto-trace"
    wall, proc = run_timed(
        [*XPU, "record", "--no-gpu", "--freq", "999", "-o", str(trace), "--", *cmd]
    )
    assert proc.returncode == 0, proc.stderr
    own = re.search(r"own CPU time: .* = ([0-9.]+)%", proc.stderr)
    OWN_PCT.append(float(own.group(1)) if own else float("nan"))
    folded = subprocess.run(
        [*XPU, "folded", str(trace), "--mode", "cpu", "--unit", "samples"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=True,
    ).stdout
    return wall, _fold_lines(folded)


def perf_dwarf(cmd: list[str], tmp: Path) -> tuple[float, Counter[str]]:
    data = tmp / "perf.data"
    wall, proc = run_timed(
        ["perf", "record", "-F", "999", "--call-graph", "dwarf", "-q", "-o", str(data), "--", *cmd]
    )
    assert proc.returncode == 0, proc.stderr
    script = subprocess.run(
        ["perf", "script", "-i", str(data), "-F", "comm,ip,sym"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    stacks: Counter[str] = Counter()
    for block in script.strip().split("\n\n"):
        lines = block.strip().splitlines()
        frames = [ln.split()[1] for ln in lines[1:] if len(ln.split()) >= 2]
        stacks[";".join(reversed(frames))] += 1
    return wall, stacks


def pyspy(cmd: list[str], tmp: Path) -> tuple[float, Counter[str]]:
    out = tmp / "spy.txt"
    exe = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    wall, proc = run_timed([exe, "record", "-r", "999", "-f", "raw", "-o", str(out), "--", *cmd])
    assert proc.returncode == 0, proc.stderr
    return wall, _fold_lines(out.read_text())


def _fold_lines(text: str) -> Counter[str]:
    out: Counter[str] = Counter()
    for line in text.splitlines():
        stack, _, n = line.rpartition(" ")
        if n.isdigit():
            # py-spy writes 'func (file.py:N)'; keep the function name alone.
            out[_LINE.sub("", stack)] += int(n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", default="3")
    ap.add_argument("--json", type=Path, default=REPO / "bench/results/cpu_sampling_vm.json")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="xpu-cpu-bench-"))
    c_src = NATIVE / "shrink_callers.c"
    programs = {}
    for name, flags in (
        ("c_o2_no_fp", ["-O2", "-g", "-fomit-frame-pointer"]),
        ("c_o1_fp", ["-O1", "-g", "-fno-omit-frame-pointer"]),
    ):
        subprocess.run(["gcc", *flags, "-o", str(tmp / name), str(c_src)], check=True)
        programs[name] = ([str(tmp / name), args.seconds], "main", ("xpu-perf", "perf dwarf"))
    programs["python"] = (
        ["/usr/bin/python3", str(NATIVE / "two_callers.py"), args.seconds],
        r"(<module>|two_callers\.py)",
        ("xpu-perf", "py-spy"),
    )
    tools = {"xpu-perf": xpu, "perf dwarf": perf_dwarf, "py-spy": pyspy}
    results: dict[str, dict[str, dict[str, float | None]]] = {}
    for prog, (cmd, root, names) in programs.items():
        splits: dict[str, list[tuple[float, float]]] = {}
        OWN_PCT.clear()
        for _ in range(args.rounds):
            for name in names:
                _wall, stacks = tools[name](cmd, tmp)
                splits.setdefault(name, []).append(folded_split(stacks, root))
        results[prog] = {}
        for name in names:
            results[prog][name] = {
                "ratio": round(statistics.median(r for r, _ in splits[name]), 3),
                "full_stacks_pct": round(statistics.median(f for _, f in splits[name]), 1),
                "own_cpu_pct": round(statistics.median(OWN_PCT), 2) if name == "xpu-perf" else None,
            }
    print("| program | tool | heavy:light | % full stacks | own CPU |")
    print("| --- | --- | --- | --- | --- |")
    for prog, by_tool in results.items():
        for name, r in by_tool.items():
            own = f"{r['own_cpu_pct']:.2f}%" if r["own_cpu_pct"] is not None else "other process"
            print(f"| {prog} | {name} | {r['ratio']:.2f} | {r['full_stacks_pct']:.1f}% | {own} |")
    args.json.write_text(json.dumps(results, indent=1))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
