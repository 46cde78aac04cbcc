"""`xpu-perf flamegraph`: an interactive flamegraph SVG of a trace's folded stacks."""

from __future__ import annotations

import argparse
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
from exporters.report import units
from exporters.report.flamegraph import render_svg
from exporters.report.scope import SPAN_HELP, describe_weights, stack_span

_WHAT = {
    "merge": "GPU time by launch context + CPU time by sampled stack",
    "gpu": "GPU time by launch context",
    "cpu": "CPU time by sampled stack",
    "idle": "GPU idle time by what the launching thread did",
}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "flamegraph",
        help="interactive flamegraph SVG (no external resources)",
        description="Draw the folded stacks of TRACE (as `xpu-perf folded` derives them) as "
        "a self-contained SVG: click a frame to zoom, 'Search' to highlight frames.",
    )
    p.add_argument("trace", type=Path, help=".perfetto-trace file")
    add_output_flag(p, "output .svg file", required=True)
    add_stack_flags(p)
    p.add_argument("--title", help="title (default: the trace file name and mode)")
    p.add_argument("--width", type=int, default=1200, help="width in px (default: 1200)")
    add_span_flag(p, SPAN_HELP)
    add_frame_flags(p)
    add_window_flag(p)
    add_trace_processor_flag(p)
    add_cache_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    apply_cache_flag(args)
    if args.width < 200:
        raise UserError("--width must be at least 200")
    if args.output is not None:
        check_output(args.output, [args.trace])  # before the queries; never the input
    try:
        with open_cached(args.trace, args.trace_processor) as trace:
            span = stack_span(trace, args.span, args.window)
            stacks = fold_mode(
                trace,
                args.mode,
                args.unit,
                full_names=args.full_names,
                window=args.window,
                all_frames=args.all_frames,
                between=span.between,
                focus=args.span == "steps",
            )
    except (TraceOpenError, QueryError, FoldedError, WindowError) as exc:
        raise UserError(str(exc)) from None
    if not stacks.lines:
        raise UserError(f"nothing to draw: the trace has no stacks for --mode {args.mode}")
    total = sum(weight for _, weight in stacks.lines)
    svg = render_svg(
        stacks.lines,
        unit=args.unit,
        title=args.title
        or f"{args.trace.name}: {args.mode} over {span.short}"
        + (f", capture window {args.window}" if args.window and span.between else ""),
        subtitle=f"{_WHAT[args.mode]}; total {units.weight(total, args.unit)}; over {span.what}",
        width=args.width,
    )
    write_output(args.output, svg)
    say(
        f"{args.output}: {len(stacks.lines)} stacks, {describe_weights(args.mode, stacks)}; "
        f"over {span.what}"
    )
    return 0
