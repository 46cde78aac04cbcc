"""`xpu-perf query`: run SQL on a trace through trace_processor."""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from collector import visible_text
from collector.commands.flags import (
    add_cache_flag,
    add_format_flag,
    add_trace_processor_flag,
    apply_cache_flag,
)
from collector.errors import UserError
from exporters.perfetto.engine.cached_trace import open_cached
from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError
from exporters.perfetto.engine.views import load_views


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "query",
        help="run SQL on a trace, or on many traces in parallel",
        description="Run SQL on a trace with Perfetto's trace_processor. The views xpu_metadata, "
        "xpu_process, xpu_gpu_op, xpu_cpu_sample, xpu_launch_stack and xpu_wait (blocking "
        "calls over record's --wait-threshold) are predefined. Given "
        "several traces, a directory or a glob, the query runs on each trace in parallel and "
        "the rows come back as one table whose first column `trace` names the trace.",
    )
    # One positional list: the last item is the SQL unless -f gives it; all before it are
    # traces, directories or globs (argparse cannot split `TRACE... [SQL]` by itself).
    p.add_argument(
        "items",
        nargs="+",
        metavar="TRACE... SQL",
        help=".perfetto-trace files, directories of them or globs, then the SQL (or use -f)",
    )
    p.add_argument("-f", "--file", type=Path, help="read the SQL from this file")
    add_format_flag(p, "table (terminal, the default), csv or json")
    p.add_argument(
        "-j",
        "--jobs",
        type=int,
        metavar="N",
        help="traces queried at once by the local process pool (default: min(CPUs, traces))",
    )
    p.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="run the batch on this Dask distributed cluster instead; each worker opens its "
        "traces from its own file system (needs xpu-perf[dist])",
    )
    add_trace_processor_flag(p)
    add_cache_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    apply_cache_flag(args)
    items: list[str] = args.items
    if args.file is None:
        if len(items) < 2:
            raise UserError("give the SQL either as an argument or with -f FILE")
        specs, sql = items[:-1], items[-1]
    else:
        specs = items
        try:
            sql = args.file.read_text()
        except OSError as exc:
            raise UserError(f"cannot read {args.file}: {exc.strerror}") from None
    if args.jobs is not None and args.jobs < 1:
        raise UserError(f"--jobs must be at least 1, not {args.jobs}")
    # Imported here: the single-trace form never loads the batch machinery.
    from collector import batch_query

    if not batch_query.is_batch(specs) and args.scheduler is None:
        return _single(Path(specs[0]), sql, args)
    traces = batch_query.expand(specs)
    results = list(
        batch_query.run(
            traces, sql, shell=args.trace_processor, jobs=args.jobs, scheduler=args.scheduler
        )
    )
    columns, rows = batch_query.merge(results)
    failed = [r for r in results if r.error is not None]
    emit(columns, rows, args.format)
    sys.stdout.flush()
    for res in failed:
        line = f"xpu-perf query: error: {res.trace}: {res.error}"
        print(visible_text.printable_lines(line), file=sys.stderr)
    return 1 if failed else 0


# The analysis layer's tables (exporters/analysis/): the steps, the classified GPU idle
# gaps, the launches and copies, over the active span.
ANALYSIS_VIEWS = re.compile(
    r"\bxpu_(step|step_busy|gpu_gap|launch|launch_kernel_stats|copy|stream_queue|"
    r"kernel_overlap|analysis_\w+|gpu_counter|kernel_metrics|memory_peak|allocation)\b"
)


def _single(trace_path: Path, sql: str, args: argparse.Namespace) -> int:
    try:
        with open_cached(trace_path, args.trace_processor) as trace:
            load_views(trace)
            if ANALYSIS_VIEWS.search(sql):
                # Built only when asked for: they cost a pass over the GPU ops.
                from exporters.analysis.analyze import load_for_query as load_analysis

                load_analysis(trace)
            columns, rows = trace.query_columns(sql)
    except (TraceOpenError, QueryError) as exc:
        raise UserError(str(exc)) from None
    emit(columns, rows, args.format)
    return 0


def emit(columns: list[str], rows: Sequence[tuple[object, ...]], fmt: str) -> None:
    """The rows as CSV and JSON exactly as the trace holds them (machine formats: JSON
    escapes controls itself, a CSV reader gets the value back); as a table for a person,
    every control character shown visibly and no cell read as rich markup."""
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt == "json":
        json.dump([dict(zip(columns, row, strict=True)) for row in rows], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        table = Table(*map(visible_text.printable, columns), show_lines=False)
        for row in rows:
            table.add_row(*("NULL" if v is None else visible_text.printable(str(v)) for v in row))
        console = Console(
            width=max(80, Console().width), markup=False, highlight=False, emoji=False
        )
        console.print(table)
