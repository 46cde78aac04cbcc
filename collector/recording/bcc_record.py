"""Standalone eBPF recording: run a command under the bcc sources and write one trace.

    python -m collector.recording.bcc_record -o out.perfetto-trace [--freq 99] \
        [--uprobe LIB:SYMBOL]... [--marker LIB] [--duration S] -- CMD...

What `xpu-perf record --no-gpu` does with the CPU sampler and launch uprobes, kept as a thin
entry for tests and for bringing eBPF up on a new machine (it adds `--uprobe`/`--marker`).
It runs the target and writes the trace with `record`'s own `run_target` and `write_trace`
(collector/recording/).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from collector.recording.target import run_target
from collector.recording.trace import write_trace
from collector.sources.bcc_sampler import DEFAULT_FREQ_HZ, BccCpuSampler
from collector.sources.bcc_source import BccSource
from collector.sources.bcc_uprobes import BccLaunchUprobes, LaunchProbe, marker_probe


def _parse_probe(text: str) -> LaunchProbe:
    library, sep, symbol = text.rpartition(":")
    if not sep or not library or not symbol:
        raise argparse.ArgumentTypeError(f"expected LIBRARY:SYMBOL, got {text!r}")
    return LaunchProbe(symbol, os.path.abspath(library) if "/" in library else library)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m collector.recording.bcc_record", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-o", "--output", type=Path, default=Path("ebpf.perfetto-trace"))
    parser.add_argument(
        "--freq", type=int, default=DEFAULT_FREQ_HZ, help="CPU samples per second of CPU time"
    )
    parser.add_argument("--no-cpu", action="store_true", help="no CPU sampler")
    parser.add_argument(
        "--uprobe", type=_parse_probe, action="append", default=[], metavar="LIB:SYMBOL"
    )
    parser.add_argument("--marker", metavar="LIB", help="library exporting the launch marker")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given (put it after --)")
    sources: list[BccSource] = []
    if not args.no_cpu:
        sources.append(BccCpuSampler(args.freq))
    probes = list(args.uprobe) + (
        [marker_probe(os.path.abspath(args.marker))] if args.marker else []
    )
    if probes:
        sources.append(BccLaunchUprobes(probes))
    code = run_target(cmd, sources, args.duration)
    freq = 0 if args.no_cpu else args.freq
    stats = write_trace(args.output, sources, [sys.argv[0], *cmd], freq)
    for name, counters in stats.items():
        summary = " ".join(f"{k}={v}" for k, v in counters.items())
        print(f"bcc_record: {name}: {summary}", file=sys.stderr)
    print(f"bcc_record: wrote {args.output}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
