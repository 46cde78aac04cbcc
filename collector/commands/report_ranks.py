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
from exporters.analysis.tables import StepsError
from exporters.perfetto.engine.cached_trace import open_cached
from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError
from exporters.perfetto.engine.views import WindowError
from exporters.report.ranks import (
    DEFAULT_STEPS,
    rank_rows,
    ranks_sql,
    section,
    trace_labels,
    verdict,
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
                per_rank = _rank_causes(trace, args.steps, args.window)
        except (TraceOpenError, QueryError, WindowError, StepsError) as exc:
            raise UserError(str(exc)) from None
        columns, rows = _with_causes(columns, rows, per_rank)
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
    worst = verdict(records)
    # The verdict in the rows too (--format json/csv): which rank, and what it says.
    columns = [*columns, "verdict"]
    rows = [
        (*row, worst.describe() if worst is not None and rec is worst.row else None)
        for row, rec in zip(rows, records, strict=True)
    ]
    if args.format == "table":
        screen = Screen()  # 15 columns: the optional ones go where they do not fit
        print_section(screen, section(records, batch, steps))
        names = trace_labels(records)[0] if batch else None
        screen.print(Text(worst.describe(names) if worst is not None else _no_verdict(records)))
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


def _no_verdict(records: list[dict[str, Any]]) -> str:
    if len([r for r in records if r.get("gpu_busy_ns")]) < 2:
        return "one rank: no other rank to compare with"
    return "no rank stands out: the collectives start together and the steps take as long"


def _rank_causes(trace: Any, steps: str | None, window: int | None) -> dict[int, Any]:
    """The analysis model per rank (exporters/analysis/rank_causes.py): each rank's own top
    cause with its line, and its steps (marked, a repeating range, or detected)."""
    from exporters.analysis.analyze import load
    from exporters.analysis.rank_causes import rank_causes
    from exporters.analysis.tables import Scope

    load(trace, Scope(steps_glob=steps or None), window)
    return rank_causes(trace)


def _with_causes(
    columns: list[str], rows: list[tuple[Any, ...]], per_rank: dict[int, Any]
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The rows with each rank's top cause (`cause`), and the analysis's steps where the
    step slices named none (detected or found ones: the same steps as `report`)."""
    at = {c: i for i, c in enumerate(columns)}
    out = []
    for row in rows:
        cells = list(row)
        found = per_rank.get(row[at["upid"]]) if row[at["upid"]] is not None else None
        if found is not None and not cells[at["steps"]] and found.steps:
            cells[at["steps"]] = found.steps
            cells[at["step_mean_ns"]] = found.step_mean_ns
        out.append((*cells, found.describe() if found is not None else None))
    return [*columns, "cause"], out
