"""The columnar Kineto conversion (prototype, issue 24), written as `convert` writes.

Not a subcommand yet: `python -m collector.commands.convert_columns IN.json -o OUT`
converts with collector/sources/kineto_columns.py into the same TraceWriter settings as
`xpu-perf convert` (level, deflate thread, the collector paused) and prints the summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from rich.console import Console

from collector.commands.convert import default_output, print_summary, summary_counters
from collector.gc_pause import collected_now_and_then
from collector.sources import kineto, kineto_columns
from exporters.perfetto.writer import CONVERT_COMPRESSION_LEVEL, TraceWriter


def write_trace(src: Path, out: Path, command_line: list[str]) -> kineto.ConvertStats:
    """Convert `src` into `out` through the columnar path; the conversion's counts."""
    stats = kineto.ConvertStats()
    head = kineto.read_head(src)
    with TraceWriter(
        out,
        command_line=command_line,
        compression_level=CONVERT_COMPRESSION_LEVEL,
        compress_in_thread=len(os.sched_getaffinity(0)) > 1,
    ) as writer:
        producer = writer.producer("kineto")
        producer.write_all(collected_now_and_then(kineto_columns.convert_columns(src, head, stats)))
        if head.host is not None:
            writer.set_metadata("host", head.host)
        for key, value in summary_counters(stats).items():
            writer.set_metadata(f"convert_{key}", value)
    return stats


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("input", type=Path)
    ap.add_argument("-o", "--output", type=Path)
    ap.add_argument("-q", "--quiet", action="store_true")
    args = ap.parse_args(argv)
    out = args.output or default_output(args.input)
    started = time.perf_counter()
    stats = write_trace(args.input, out, sys.argv)
    print_summary(
        Console(stderr=True, quiet=args.quiet),
        args.input,
        out,
        stats,
        time.perf_counter() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
