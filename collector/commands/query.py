"""`xpu-perf query`: run SQL on a trace through trace_processor."""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from collector.errors import UserError
from exporters.perfetto.trace_processor import QueryError, TraceOpenError, open_trace
from exporters.perfetto.views import load_views


def add_trace_processor_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace-processor",
        metavar="PATH",
        help="use this native trace_processor_shell (or set XPU_PERF_TRACE_PROCESSOR); "
        "default: the embedded engine",
    )


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "query",
        help="run SQL on a trace",
        description="Run SQL on a trace with Perfetto's trace_processor. The views xpu_metadata, "
        "xpu_gpu_op, xpu_cpu_sample and xpu_launch_stack are predefined.",
    )
    p.add_argument("trace", type=Path, help=".perfetto-trace file")
    p.add_argument("sql", nargs="?", help="SQL to run (or use -f)")
    p.add_argument("-f", "--file", type=Path, help="read the SQL from this file")
    p.add_argument("--format", choices=("table", "csv", "json"), default="table")
    add_trace_processor_flag(p)
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if (args.sql is None) == (args.file is None):
        raise UserError("give the SQL either as an argument or with -f FILE")
    if args.file is not None:
        try:
            sql = args.file.read_text()
        except OSError as exc:
            raise UserError(f"cannot read {args.file}: {exc.strerror}") from None
    else:
        sql = args.sql
    try:
        with open_trace(args.trace, args.trace_processor) as trace:
            load_views(trace)
            columns, rows = trace.query_columns(sql)
    except (TraceOpenError, QueryError) as exc:
        raise UserError(str(exc)) from None
    emit(columns, rows, args.format)
    return 0


def emit(columns: list[str], rows: list[tuple[Any, ...]], fmt: str) -> None:
    if fmt == "csv":
        writer = csv.writer(sys.stdout)
        writer.writerow(columns)
        writer.writerows(rows)
    elif fmt == "json":
        json.dump([dict(zip(columns, row, strict=True)) for row in rows], sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        table = Table(*columns, show_lines=False)
        for row in rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        Console(width=max(80, Console().width)).print(table)
