"""`xpu-perf report`: what a trace says, as terminal tables and optionally one HTML page."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from collector.cli_text import FINDINGS_IN_WORDS
from collector.commands.flags import (
    add_cache_flag,
    add_format_flag,
    add_frame_flags,
    add_output_flag,
    add_span_flag,
    add_steps_flag,
    add_trace_processor_flag,
    add_window_flag,
    apply_cache_flag,
)
from collector.commands.output import check_outputs, write_output
from collector.errors import UserError
from exporters.analysis.annotate import Mark, add_marks, annotation_marks
from exporters.analysis.tables import Scope, StepsError
from exporters.folded.folded import FoldedError
from exporters.perfetto.engine.cached_trace import open_cached
from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError
from exporters.report.html_page import render_html
from exporters.report.queries import DEFAULT_BINS, DEFAULT_TOP, collect
from exporters.report.scope import stack_span
from exporters.report.terminal import KEY_ROWS, print_report


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "report",
        help="findings (why the GPU waits, at which line, what to change), steps, top kernels",
        description="What a trace says, answers first. Findings, ranked by the GPU time each "
        f"explains, each with its evidence, the code to change and how: {FINDINGS_IN_WORDS}. "
        "Then the steps (wall time, GPU busy by kind, idle), GPU idle by cause, and the top "
        "kernels, functions (CPU samples) and launch sites: one screen. --all adds every "
        "table: GPU busy vs idle per device and stream over time, memcpy volume and "
        "bandwidth, the costliest CUDA API calls, launch latency, queue depth, GPU counters, "
        "the recorder's drop/match counters. -o also writes a self-contained HTML page with "
        "a utilisation timeline and an interactive flamegraph.",
    )
    p.add_argument(
        "traces",
        nargs="+",
        metavar="TRACE",
        help=".perfetto-trace file (with --ranks: several, a directory or a glob)",
    )
    p.add_argument(
        "--ranks",
        action="store_true",
        help="only the per-rank table: GPU busy, compute vs NCCL communication, NCCL time "
        "not hidden by compute, step times, and the slowest rank; of one (merged) trace, or "
        "of several traces queried in parallel (one table, a `trace` column first)",
    )
    add_steps_flag(
        p,
        "the step slices (NVTX ranges or any slice on a thread), a name or GLOB pattern "
        "(an error where none match; default: 'ProfilerStep#*', else a range that repeats on "
        "the launching process, else repeated CUDA graph launches, else the repeating "
        "sequence of launches)",
    )
    add_format_flag(
        p,
        "table (terminal); json: findings, steps, span and idle by cause for scripts "
        "and CI (with --ranks also csv: the per-rank table, numbers in ns, unrounded)",
    )
    add_span_flag(
        p,
        "what the report covers: steps (default): the findings, top functions and the "
        "flamegraph look at the steady state, from each process's second step, the GPU busy "
        "tables at the active span; active: the same, the flamegraph (and --annotate's marks) "
        "over the active span (first GPU op to the end of the last: imports and set-up "
        "before it are not GPU idle); all: everything over the whole trace",
    )
    p.add_argument(
        "--annotate",
        type=Path,
        metavar="OUT",
        help="also write a copy of the trace with a track of steps per process and a track "
        "of classified GPU idle gaps per GPU, for the Perfetto UI (`xpu-perf view OUT`): "
        "those of the span the findings cover (--span)",
    )
    add_output_flag(p, "also write this HTML page")
    p.add_argument(
        "--all",
        "--verbose",
        dest="all",
        action="store_true",
        help="every table and fact (GPU busy per stream over time, copies, CUDA API calls, "
        "launch latency, queues, GPU counters, the recorder's counters...); by default one "
        "screen: the findings, steps, idle causes, top kernels, functions and launch sites",
    )
    p.add_argument(
        "--top",
        type=int,
        default=None,
        help=f"rows per table (default: {KEY_ROWS} on the one screen, {DEFAULT_TOP} with "
        "--all and in the HTML page)",
    )
    p.add_argument(
        "--bins",
        type=int,
        default=DEFAULT_BINS,
        help=f"time bins of the utilisation timeline (default: {DEFAULT_BINS})",
    )
    add_frame_flags(p)
    p.add_argument(
        "--stacks",
        action="store_true",
        help="also the heaviest whole CPU stacks (default: CPU time by function only)",
    )
    add_window_flag(p)
    add_trace_processor_flag(p)
    add_cache_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    apply_cache_flag(args)
    if args.ranks:
        for flag, out, what in (
            ("--annotate", args.annotate, "annotated copy"),
            ("-o", args.output, "HTML page"),
        ):
            if out is not None:
                raise UserError(
                    f"--ranks writes no {what}: drop {flag}, or run report on one trace "
                    f"without --ranks for its {what}"
                )
        from collector.commands.report_ranks import report_ranks

        return report_ranks(args)
    if args.format == "csv":
        raise UserError("--format csv goes with --ranks; use --format json")
    if len(args.traces) != 1:
        raise UserError("one trace at a time (several only with --ranks)")
    args.trace = Path(args.traces[0])
    rows = args.top
    if args.top is None:
        args.top = DEFAULT_TOP
    if args.top < 1:
        raise UserError("--top must be at least 1")
    if not 1 <= args.bins <= 2000:
        raise UserError("--bins must be 1..2000")
    # Said before the queries run, not after; never the input trace, never one file twice.
    check_outputs({"-o": args.output, "--annotate": args.annotate}, [args.trace])
    scope = Scope(span_all=args.span == "all", steps_glob=args.steps or None)
    try:
        with open_cached(args.trace, args.trace_processor) as trace:
            report = collect(
                trace,
                args.trace.name,
                top=args.top,
                bins=args.bins,
                full_names=args.full_names,
                all_frames=args.all_frames,
                stacks=args.stacks,
                window=args.window,
                scope=scope,
                flame_span=args.span,
            )
            marked, marks = None, []
            if args.annotate is not None:
                # The copy marks what the findings cover, as folded, flamegraph and view show.
                marked = stack_span(trace, args.span, args.window, args.steps or None)
                marks = annotation_marks(trace, marked.between)
    except (TraceOpenError, QueryError, FoldedError, StepsError) as exc:
        raise UserError(str(exc)) from None
    # The page first: a run that cannot write it fails with one line and shows nothing.
    if args.output is not None:
        write_output(args.output, render_html(report))
    if marked is not None:
        _write_annotated(args.trace, args.annotate, marks)
    if args.format == "json":
        assert report.analysis is not None
        print(json.dumps({"trace": str(args.trace), **report.analysis.to_json()}, indent=1))
    else:
        print_report(report, full=args.all, trace_path=str(args.trace), rows=rows)
    if args.output is not None:
        print(f"wrote {args.output}", file=sys.stderr)
    if marked is not None:
        print(f"wrote {args.annotate}: steps and GPU idle gaps over {marked.what}", file=sys.stderr)
    return 0


def _write_annotated(source: Path, output: Path, marks: list[Mark]) -> None:
    """The annotated copy: the merge of the one input, plus the analysis's marks."""
    from collector.merge.traces import merge_traces

    merge_traces([source], output, add_events=lambda writer: add_marks(writer, marks))
