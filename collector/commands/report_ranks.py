"""`xpu-perf report --ranks TRACE...`: the per-rank table of one trace, or of several traces
through the batch query (collector/batch_query.py), and the slowest rank."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from rich.text import Text

from collector import batch_query
from collector.commands.query import emit
from collector.errors import UserError
from collector.visible_text import printable_lines
from exporters.perfetto.cached_trace import open_cached
from exporters.perfetto.trace_processor import QueryError, TraceOpenError
from exporters.perfetto.views import WindowError
from exporters.report.ranks import (
    DEFAULT_STEPS,
    rank_rows,
    ranks_sql,
    section,
    slowest,
    trace_labels,
)
from exporters.report.terminal import Screen, print_section


def report_ranks(args: argparse.Namespace) -> int:
    steps = args.steps or DEFAULT_STEPS
    batch = batch_query.is_batch(args.traces)
    failed: list[batch_query.TraceResult] = []
    if not batch:
        path = Path(args.traces[0])
        try:
            with open_cached(path, args.trace_processor) as trace:
                columns, rows = rank_rows(trace, steps, args.window)
        except (TraceOpenError, QueryError, WindowError) as exc:
            raise UserError(str(exc)) from None
    else:
        results = list(
            batch_query.run(
                batch_query.expand(args.traces),
                ranks_sql(steps),
                shell=args.trace_processor,
                window=args.window,
            )
        )
        columns, rows = batch_query.merge(results)
        failed = [r for r in results if r.error is not None]
    records: list[dict[str, Any]] = [dict(zip(columns, row, strict=True)) for row in rows]
    worst = slowest(records)
    if args.format == "table":
        screen = Screen()  # 14 columns: the optional ones go where they do not fit
        print_section(screen, section(records, batch, steps))
        if worst is not None:
            screen.print(Text(worst.describe(trace_labels(records)[0] if batch else None)))
        screen.flush()
    else:
        emit(columns, rows, args.format)
        sys.stdout.flush()
        if worst is not None:
            print(worst.describe(), file=sys.stderr)
    sys.stdout.flush()
    for res in failed:
        print(printable_lines(f"xpu-perf report: error: {res.trace}: {res.error}"), file=sys.stderr)
    return 1 if failed else 0
