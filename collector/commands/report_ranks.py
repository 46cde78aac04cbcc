"""`xpu-perf report --ranks TRACE...`: the per-rank table of one trace, or of several traces
through the batch query (collector/batch_query.py), and the slowest rank."""

from __future__ import annotations

import argparse
import dataclasses
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
    COLLECTIVES_COLUMN,
    DEFAULT_STEPS,
    Straggler,
    arrival_across_traces,
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
        if args.steps:
            _check_steps(args.steps, [r.trace for r in results if r.error is None], columns, rows)
    records: list[dict[str, Any]] = [dict(zip(columns, row, strict=True)) for row in rows]
    if batch:
        # Separate traces: their clocks differ, so ranks.sql compared no collectives across
        # them; compared here by each collective's in-kernel time.
        records = arrival_across_traces(records)
        columns = [*columns, "cause"]
        records = [{**r, "cause": None} for r in records]
    worst = verdict(records)
    if batch and isinstance(worst, Straggler):
        worst = _with_own_cause(worst, args)
        worst.row["cause"] = worst.cause or None
    # The verdict in the rows too (--format json/csv): which rank, and what it says.
    columns = [c for c in columns if c != COLLECTIVES_COLUMN]
    rows = [
        (
            *(rec[c] for c in columns),
            worst.describe() if worst is not None and rec is worst.row else None,
        )
        for rec in records
    ]
    columns = [*columns, "verdict"]
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


def _check_steps(
    steps: str, traces: list[str], columns: list[str], rows: list[tuple[object, ...]]
) -> None:
    """`--steps NAME` naming no slice of a trace of the batch is an error, as on one trace
    (steps.sql's StepsError): the table would fall back to other steps without saying so."""
    if not traces:
        return  # none answered: their errors are the output
    at_trace, at_steps = columns.index("trace"), columns.index("steps")
    with_steps = {str(r[at_trace]) for r in rows if r[at_steps]}
    missing = [t for t in traces if t not in with_steps]
    if missing:
        names = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise UserError(
            f"--steps {steps!r}: no slice of that name in {names}; "
            "name a slice every trace has (see `xpu-perf report` on one of them)"
        )


def _with_own_cause(worst: Straggler, args: argparse.Namespace) -> Straggler:
    """The straggler of a batch with its own top cause and line: the analysis on its trace."""
    path = Path(str(worst.row["trace"]))
    try:
        with open_cached(path, args.trace_processor) as trace:
            per_rank = _rank_causes(trace, args.steps, args.window)
    except (TraceOpenError, QueryError, WindowError, StepsError) as exc:
        raise UserError(f"{path}: {exc}") from None
    upid = worst.row.get("upid")
    found = per_rank.get(int(upid)) if upid is not None else None
    if found is None:
        return worst
    return dataclasses.replace(worst, cause=found.describe())


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
