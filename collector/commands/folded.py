"""`xpu-perf folded`: flamegraph input derived from a trace by SQL."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from collector.commands.flags import (
    add_cache_flag,
    add_frame_flags,
    add_output_flag,
    add_span_flag,
    add_stack_flags,
    add_trace_processor_flag,
    add_window_flag,
    apply_cache_flag,
)
from collector.commands.output import say, write_output
from collector.errors import UserError
from collector.files import check_output
from exporters.analysis.idle_stacks import fold_mode
from exporters.folded.folded import FoldedError
from exporters.perfetto.engine.cached_trace import open_cached
from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError
from exporters.perfetto.engine.views import WindowError
from exporters.report.scope import SPAN_HELP, describe_weights, stack_span


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "folded",
        help="folded stacks for flamegraph.pl / speedscope",
        description="Write folded stacks ('frame;frame;... weight'). gpu: launch context -> API "
        "call -> [GPU_Kernel]/[GPU_Memcpy]/[GPU_Memset] weighted by GPU time; cpu: timer "
        "samples; merge: both in one unit; idle: what the CPU did while the GPU waited, "
        "weighted by GPU idle time.",
    )
    p.add_argument("trace", type=Path, help=".perfetto-trace file")
    add_output_flag(p, "output file (default: stdout)")
    add_stack_flags(p)
    p.add_argument(
        "--freq",
        type=float,
        help="with --unit samples: samples per second used to turn time into samples "
        "(default: the recorded sampling frequency, else 99)",
    )
    add_span_flag(p, SPAN_HELP)
    add_frame_flags(p)
    add_window_flag(p)
    add_trace_processor_flag(p)
    add_cache_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    apply_cache_flag(args)
    if args.freq is not None and args.freq <= 0:
        raise UserError("--freq must be positive")
    if args.output is not None:
        check_output(args.output, [args.trace])  # before the queries; never the input
    try:
        with open_cached(args.trace, args.trace_processor) as trace:
            span = stack_span(trace, args.span, args.window)
            stacks = fold_mode(
                trace,
                args.mode,
                args.unit,
                args.freq,
                full_names=args.full_names,
                all_frames=args.all_frames,
                window=args.window,
                between=span.between,
                focus=args.span == "steps",
            )
    except (TraceOpenError, QueryError, FoldedError, WindowError) as exc:
        raise UserError(str(exc)) from None
    text = stacks.render()
    if args.output is None:
        sys.stdout.write(text)
        say(f"folded: over {span.what}")
    else:
        write_output(args.output, text)
        say(
            f"{args.output}: {len(stacks.lines)} stacks, {describe_weights(args.mode, stacks)}; "
            f"over {span.what}"
        )
    return 0
