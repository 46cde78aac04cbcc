"""One SQL query over many traces: `xpu-perf query TRACE... SQL`.

Each trace is opened by one worker, queried and closed before the worker takes the next, so
a worker holds one trace's engine at a time however many traces the batch has.  Workers are
a local process pool by default (trace_processor is single-threaded per trace; processes,
not threads, give the parallelism), or the workers of a Dask distributed cluster
(`--scheduler tcp://HOST:PORT`): the client sends only the paths and the SQL, each worker
opens the files from its own file system (so the paths must name the same files there: a
shared file system, or the node-local paths of the node the trace was recorded on).

A trace that cannot be opened or queried is a TraceResult with `error` set: the others still
run and print.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from pathlib import Path

from collector.errors import UserError

# What a directory argument contributes: the names `record`, `convert` and Perfetto write.
TRACE_SUFFIXES = (".perfetto-trace", ".pftrace")
_GLOB_CHARS = frozenset("*?[")


@dataclass
class TraceResult:
    """The answer of one trace: its columns and rows, or one line saying why not."""

    trace: str
    columns: list[str] = field(default_factory=list)
    rows: list[tuple[object, ...]] = field(default_factory=list)
    error: str | None = None


def is_batch(specs: Sequence[str]) -> bool:
    """Whether the trace arguments name a batch (several, a directory or a glob) rather than
    the one trace file of the single-trace form, whose output has no `trace` column."""
    if len(specs) != 1:
        return True
    spec = specs[0]
    return os.path.isdir(spec) or (not os.path.exists(spec) and bool(_GLOB_CHARS & set(spec)))


def expand(specs: Sequence[str]) -> list[str]:
    """The traces named by files, directories (their trace files, sorted) and globs (their
    matches, sorted), in argument order, each once.  A file that does not exist stays, so
    its error is reported with the others'; a directory or glob naming nothing is an error."""
    traces: list[str] = []
    for spec in specs:
        if os.path.isdir(spec):
            found = sorted(str(p) for p in Path(spec).iterdir() if p.name.endswith(TRACE_SUFFIXES))
            if not found:
                raise UserError(f"no trace files ({', '.join(TRACE_SUFFIXES)}) in {spec}")
        elif not os.path.exists(spec) and _GLOB_CHARS & set(spec):
            found = sorted(glob.glob(spec))
            if not found:
                raise UserError(f"no file matches {spec}")
        else:
            found = [spec]
        traces.extend(found)
    return list(dict.fromkeys(traces))


def query_one(
    trace: str, sql: str, shell: str | None = None, window: int | None = None
) -> TraceResult:
    """Open one trace, run the SQL with the shared views (over capture window `window` of
    each process, or the whole trace), close it.  Runs in a worker."""
    # Imported here: a worker pays for the engine, the CLI's --help does not.
    from exporters.perfetto.engine.cached_trace import open_cached
    from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError
    from exporters.perfetto.engine.views import WindowError, load_views

    try:
        with open_cached(trace, shell) as t:
            load_views(t, window)
            columns, rows = t.query_columns(sql)
    except (TraceOpenError, QueryError, WindowError) as exc:
        return TraceResult(trace, error=str(exc))
    return TraceResult(trace, list(columns), [tuple(r) for r in rows])


def run(
    traces: Sequence[str],
    sql: str,
    *,
    shell: str | None = None,
    jobs: int | None = None,
    scheduler: str | None = None,
    window: int | None = None,
) -> Iterator[TraceResult]:
    """The result of every trace, in the order of `traces`."""
    if scheduler is not None:
        yield from _run_dask(traces, sql, shell, scheduler, window)
        return
    workers = max(1, min(jobs or os.cpu_count() or 1, len(traces)))
    if workers == 1:
        for trace in traces:
            yield query_one(trace, sql, shell, window)
        return
    # spawn, not fork: a worker starts from a clean interpreter whatever threads or engine
    # state the parent holds.
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        # chunksize 1: traces differ in size by orders of magnitude; an idle worker takes
        # the next one.
        n = len(traces)
        yield from pool.map(query_one, traces, [sql] * n, [shell] * n, [window] * n, chunksize=1)


def _run_dask(
    traces: Sequence[str], sql: str, shell: str | None, scheduler: str, window: int | None
) -> Iterator[TraceResult]:
    try:
        from distributed import Client
    except ImportError:
        raise UserError(
            "--scheduler needs Dask distributed: pip install 'xpu-perf[dist]'"
        ) from None
    try:
        client = Client(scheduler, timeout="10s")
    except (OSError, TimeoutError) as exc:
        raise UserError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    with client:
        # pure=False: the same path may hold a new trace by the next run; never reuse a
        # cached answer.
        futures = client.map(query_one, traces, sql=sql, shell=shell, window=window, pure=False)
        for trace, future in zip(traces, futures, strict=True):
            try:
                yield future.result()
            except Exception as exc:  # a worker died or the task failed outside query_one
                yield TraceResult(trace, error=f"{type(exc).__name__}: {exc}".splitlines()[0])


def merge(results: Sequence[TraceResult]) -> tuple[list[str], list[tuple[object, ...]]]:
    """One table: `trace` first, then the query's columns (those of the first trace that
    answered); a trace whose columns differ becomes an error, not a misaligned row."""
    columns: list[str] | None = None
    rows: list[tuple[object, ...]] = []
    for res in results:
        if res.error is not None:
            continue
        if columns is None:
            columns = res.columns
        elif res.columns != columns:
            res.error = f"columns {res.columns} differ from the other traces' {columns}"
            continue
        rows.extend((res.trace, *row) for row in res.rows)
    return ["trace", *(columns or [])], rows
