"""Overhead of the eBPF CPU sampler on a CPU-bound program (a benchmark, not a timed test).

    sudo .venv/bin/python bench/sampler_overhead.py [--runs 7] [--freq 99 999] [--millions 300]

Runs tests/native/cpu_bound.c alone and under the standalone eBPF recorder (the sources
`record` uses), interleaved (plain, sampled at each frequency, plain, ...) so drifts in machine
load hit all variants alike; reports the medians of the program's own wall time (printed by
the program, so the recorder's start-up and trace writing are not counted).  Wall times are
only as steady as the machine; the time the kernel spent in the BPF programs
(kernel.bpf_stats_enabled, switched on for the run) is the direct cost, steady anywhere.
Prints a markdown table for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.native.build import build_all  # noqa: E402


def run_plain(exe: Path, millions: int) -> float:
    out = subprocess.run([str(exe), str(millions)], capture_output=True, text=True, check=True)
    return float(out.stdout.split()[0])


def run_sampled(exe: Path, millions: int, freq: int, out_dir: Path) -> tuple[float, int, int]:
    trace = out_dir / f"sampled_{freq}.perfetto-trace"
    proc = subprocess.run(
        [sys.executable, "-m", "collector.recording.bcc_record", "-o", str(trace),
         "--freq", str(freq), "--", str(exe), str(millions)],
        cwd=REPO, capture_output=True, text=True, check=True,
    )  # fmt: skip
    samples = int(proc.stderr.split("cpu_samples=")[1].split()[0])
    bpf_ns = int(proc.stderr.split("bpf_run_ns=")[1].split()[0])
    wall = float(proc.stdout.split()[0])
    return wall, samples, bpf_ns


class BpfStats:
    """kernel.bpf_stats_enabled on for the benchmark (BPF run time per program), then back."""

    path = Path("/proc/sys/kernel/bpf_stats_enabled")

    def __enter__(self) -> None:
        self.previous = self.path.read_text().strip()
        self.path.write_text("1")

    def __exit__(self, *exc: object) -> None:
        self.path.write_text(self.previous)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--freq", type=int, nargs="+", default=[99, 999])
    parser.add_argument("--millions", type=int, default=300, help="work size (~1 s per 300)")
    parser.add_argument("--json", type=Path, help="also write the raw timings here")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp, BpfStats():
        exe = build_all(Path(tmp) / "native")["cpu_bound"]
        run_plain(exe, args.millions)  # warm caches and the CPU frequency governor
        plain: list[float] = []
        sampled: dict[int, list[float]] = {f: [] for f in args.freq}
        samples: dict[int, list[int]] = {f: [] for f in args.freq}
        bpf_share: dict[int, list[float]] = {f: [] for f in args.freq}
        for i in range(args.runs):
            plain.append(run_plain(exe, args.millions))
            for freq in args.freq:
                wall, n, bpf_ns = run_sampled(exe, args.millions, freq, Path(tmp))
                sampled[freq].append(wall)
                samples[freq].append(n)
                bpf_share[freq].append(bpf_ns / (wall * 1e9))
            print(f"run {i + 1}/{args.runs}: plain {plain[-1]:.3f} s, "
                  + ", ".join(f"{f} Hz {sampled[f][-1]:.3f} s" for f in args.freq),
                  file=sys.stderr)  # fmt: skip

    base = statistics.median(plain)
    spread = (max(plain) - min(plain)) / base
    print("| variant | median wall (s) | wall overhead | BPF time / target time | samples |")
    print("|---|---|---|---|---|")
    print(f"| no sampling ({args.runs} runs, spread {spread:.1%}) | {base:.3f} | - | - | - |")
    for freq in args.freq:
        med = statistics.median(sampled[freq])
        print(
            f"| eBPF sampler {freq} Hz | {med:.3f} | {med / base - 1:+.2%} | "
            f"{statistics.median(bpf_share[freq]):.3%} | {statistics.median(samples[freq])} |"
        )
    if args.json:
        raw = {"plain": plain, "sampled": sampled, "samples": samples, "bpf_share": bpf_share}
        args.json.write_text(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
