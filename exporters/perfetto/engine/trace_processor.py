"""Access to Perfetto's trace_processor: the one way anything downstream reads a trace.

Two backends behind the `perfetto` package's `TraceProcessor` API:
- a native `trace_processor_shell`, when the user names one (`--trace-processor PATH`
  or `XPU_PERF_TRACE_PROCESSOR`), driven by the package's own HTTP subprocess backend;
- otherwise the embedded engine (`wasm_engine.py`), which needs no network and no binary.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from collector.files import FileError, check_input, starts_framed
from exporters.perfetto import wire
from exporters.perfetto.engine_limit import EngineMemoryError, too_big

if TYPE_CHECKING:
    import numpy as np
    from perfetto.trace_processor import TraceProcessor

    from exporters.perfetto.engine.wasm_engine import WasmTransport

# The perfetto package (and numpy, which it imports) is imported where a trace is loaded,
# not here: a second look answered from the result cache (cached_trace.py) loads nothing,
# and importing it would be most of such a look.

# A row of a query's answer: column name -> the cell (int, float, str, bytes or None).
Row = dict[str, Any]

ENV_SHELL = "XPU_PERF_TRACE_PROCESSOR"
# Traces are fed to the engine in chunks of this size (the engine's request buffer
# must hold one chunk plus framing).
_CHUNK_BYTES = 8 * 1024 * 1024


class TraceOpenError(Exception):
    """A trace could not be opened or parsed; the message is one line for the user."""


class QueryError(Exception):
    """A query failed; the message is trace_processor's error, reduced to one line."""


class EngineFailure(QueryError):
    """The engine itself failed while answering (out of memory, a crash), not the SQL: the
    same statement may succeed on another run, so no cache keeps this answer."""


class _FramingCheck:
    """Follows the top-level `Trace.packet` framing while the file streams past.

    trace_processor silently keeps what it could parse from a truncated file; a profile
    missing its tail must not look complete, so the reader checks that the last packet
    ends exactly at the end of the file.
    """

    def __init__(self) -> None:
        self.next_packet = 0  # file offset where the next framed packet starts
        self.offset = 0  # bytes seen so far
        self._carry = b""

    def feed(self, chunk: bytes) -> None:
        data = self._carry + chunk
        base = self.offset - len(self._carry)
        pos = self.next_packet - base
        end = len(data)
        while pos < end:
            if data[pos] != 0x0A:
                raise TraceOpenError(
                    f"not a Perfetto protobuf trace (bad packet framing at byte {base + pos})"
                )
            try:
                length, body = wire.read_varint(data, pos + 1)
            except IndexError:
                break  # the length prefix continues in the next chunk
            pos = body + length
        self.next_packet = base + pos
        self.offset = base + len(data)
        self._carry = data[pos:] if pos < end else b""

    def check_complete(self, path: Path) -> None:
        if self.next_packet != self.offset:
            raise TraceOpenError(
                f"{path} is truncated: its last packet needs {self.next_packet - self.offset} "
                "more bytes (was the recording interrupted?)"
            )


def _chunks(path: Path, framing: _FramingCheck | None) -> Iterator[bytes]:
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK_BYTES):
            if framing is not None:
                framing.feed(chunk)
            yield chunk
    if framing is not None:
        framing.check_complete(path)


def _one_line(text: str) -> str:
    """trace_processor errors are a SQL 'traceback' whose last line is the cause; keep the
    cause and where it happened ("syntax error (line 1 col 1)")."""
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    if not lines:
        return "unknown error"
    where = next((ln for ln in lines if ln.startswith("File ")), None)
    if lines[0].startswith("Traceback") and where is not None:
        position = where.split('"', 2)[-1].strip()
        return f"{lines[-1]} ({position})" if position else lines[-1]
    return lines[-1] if lines[0].startswith("Traceback") else lines[0]


def _row_tuples(result: Any, columns: list[str]) -> list[tuple[Any, ...]]:
    """The result's rows as tuples, taken a column at a time from the cells the perfetto
    package decoded (a numpy object array, row after row): its own iterator makes an object
    per row and sets each cell as an attribute, much slower.  The same cell objects either
    way."""
    cells = getattr(result, "cells", None)
    n = len(columns)
    if n == 0:
        return []
    if cells is None or len(cells) != len(result) * n:
        return [tuple(getattr(row, c) for c in columns) for row in result]
    return list(zip(*(cells[i::n].tolist() for i in range(n)), strict=True))


def sql_literal(value: object) -> str:
    """A text value, number or NULL as a SQL literal."""
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def _values_table(
    name: str, columns: Iterable[str], select: list[str], literals: Sequence[Iterable[str]]
) -> str:
    """CREATE PERFETTO TABLE `name` AS SELECT `select` over the rows whose cells, a column
    at a time, are these SQL literals (`columnN` in `select`); with no rows, an empty table
    of NULL `columns`."""
    rows = "),(".join(map(",".join, zip(*literals, strict=True)))
    if not rows:
        nothing = ", ".join(f"NULL AS {c}" for c in columns)
        return f"CREATE PERFETTO TABLE {name} AS SELECT {nothing} WHERE 0"
    return f"CREATE PERFETTO TABLE {name} AS SELECT {', '.join(select)} FROM (VALUES ({rows}))"


def table_sql(name: str, columns: tuple[str, ...], rows: Sequence[tuple[object, ...]]) -> str:
    """CREATE PERFETTO TABLE `name` of these rows (values as SQL literals): for the small
    tables Python works out (per stream, per device): the engine parses every cell."""
    select = [f"column{i + 1} AS {c}" for i, c in enumerate(columns)]
    # A column at a time, integers by str(): row by row was much slower.
    literals: list[Iterator[str]] = [
        map(str, col) if all(type(v) is int for v in col) else map(sql_literal, col)
        for col in zip(*rows, strict=True)
    ] or [iter(()) for _ in columns]
    return _values_table(name, columns, select, literals)


@dataclass(frozen=True)
class ArrayTable:
    """A table Python worked out, as int64 columns: what `Trace.create_table` writes.
    `null_if`: per column, the value that stands for NULL."""

    name: str
    columns: dict[str, np.ndarray]
    null_if: dict[str, int] = field(default_factory=dict)

    def digest(self) -> str:
        """What names these rows (the result cache chains it instead of the SQL text, which
        a second look would have to build from the arrays)."""
        h = hashlib.blake2b(digest_size=20)
        h.update(repr((self.name, list(self.columns), sorted(self.null_if.items()))).encode())
        for values in self.columns.values():
            h.update(values.astype("<i8").tobytes())
        return h.hexdigest()

    def sql(self) -> str:
        select = [
            f"nullif(column{i + 1}, {self.null_if[c]}) AS {c}"
            if c in self.null_if
            else f"column{i + 1} AS {c}"
            for i, c in enumerate(self.columns)
        ]
        literals = [map(str, values.tolist()) for values in self.columns.values()]
        return _values_table(self.name, self.columns, select, literals)


def typed_column(cells: np.ndarray) -> np.ndarray:
    """int64 where every cell is an integer, else the cells as they are (objects)."""
    import numpy as np

    if cells.dtype == np.int64:
        return cells
    try:
        ints = np.array(cells.tolist())
    except (ValueError, OverflowError):
        return cells
    return ints if ints.dtype == np.int64 else cells


def object_array(values: Sequence[object]) -> np.ndarray:
    """A one-dimensional numpy array of these cells, whatever they are."""
    import numpy as np

    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


class Trace:
    """An opened trace.  `query` returns rows as dicts; errors are `QueryError`."""

    # What the readers derive from this trace once (exporters/analysis/session.py's
    # AnalysisSession), kept with it so it goes when the trace does; None until an analysis
    # starts it.  The engine never reads it (a class default: CachedTrace skips __init__).
    analysis_session: object | None = None

    def __init__(self, tp: TraceProcessor) -> None:
        self._tp = tp
        # The SQL modules (and Python-made tables) loaded so far, with their parameters:
        # sql_modules.py's record of this trace, so each loads once.
        self.sql_loaded: dict[str, dict[str, object]] = {}

    def query(self, sql: str) -> list[Row]:
        columns, rows = self.query_columns(sql)
        return [dict(zip(columns, row, strict=True)) for row in rows]

    def _result(self, sql: str) -> Any:
        """The perfetto package's result of `sql`, its failures as this module's errors."""
        from perfetto.trace_processor.api import TraceProcessorException

        try:
            return self._tp.query(sql)
        except TraceProcessorException as exc:
            raise QueryError(_one_line(str(exc))) from None
        except EngineMemoryError:
            # The tables a query builds (report's analysis) can fill the heap the trace
            # left; the engine is gone after this.
            raise EngineFailure(too_big("the trace with the tables this command builds")) from None
        except RuntimeError as exc:  # the embedded engine aborted (WasmEngineError)
            raise EngineFailure(_one_line(str(exc))) from None

    def query_columns(self, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        """Column names and row tuples, for table/csv output."""
        result = self._result(sql)
        columns = list(result.column_names)
        return columns, _row_tuples(result, columns)

    def query_arrays(self, sql: str) -> dict[str, np.ndarray]:
        """The result's columns as numpy arrays: int64 where every cell is an integer, else
        the decoded cells (objects).  For work over many rows that numpy does in a fraction
        of the engine's time (binning intervals, merging busy islands)."""
        import numpy as np

        result = self._result(sql)
        columns = list(result.column_names)
        cells = getattr(result, "cells", None)
        if not isinstance(cells, np.ndarray) or len(cells) != len(result) * len(columns):
            cells = object_array([v for row in _row_tuples(result, columns) for v in row])
        n = len(columns)
        return {c: typed_column(cells[i::n]) for i, c in enumerate(columns)}

    def execute(self, script: str) -> None:
        """Run statements for their effect (views, tables); trace_processor runs them all."""
        self.query(script)

    def create_table(self, table: ArrayTable) -> None:
        """Write a table of Python's rows into the engine (it parses every cell)."""
        self.execute(table.sql())

    def scalar(self, sql: str) -> Any:
        rows = self.query(sql)
        return next(iter(rows[0].values())) if rows else None

    def embedded_transport(self) -> WasmTransport | None:
        """The embedded engine under this trace, None with a native shell."""
        from exporters.perfetto.engine.wasm_engine import WasmTransport

        transport = getattr(getattr(self._tp, "http", None), "transport", None)
        return transport if isinstance(transport, WasmTransport) else None

    def engine_heap_bytes(self) -> int | None:
        """The embedded engine's heap now, None with a native shell: what a loaded trace
        costs the engine (bench/scale.py measures engine_limit.py's numbers with it)."""
        transport = self.embedded_transport()
        return transport.heap_bytes() if transport is not None else None

    def close(self) -> None:
        self._tp.close()

    def __enter__(self) -> Trace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _looks_like_proto(path: Path) -> bool:
    # Other formats (JSON, systrace...) that trace_processor also reads are not framed.
    with path.open("rb") as f:
        return f.read(1) == b"\x0a"


def _json_start(path: Path) -> bytes | None:
    """The first bytes of `path`'s text (gunzipped) where it is JSON (an object or an
    array), else None."""
    import gzip
    import zlib

    try:
        with path.open("rb") as raw:
            if raw.read(2) == b"\x1f\x8b":
                raw.seek(0)
                with gzip.GzipFile(fileobj=raw) as text:
                    start = text.read(_JSON_SNIFF)
            else:
                raw.seek(0)
                start = raw.read(_JSON_SNIFF)
    except (OSError, EOFError, zlib.error):
        return None
    head = start.lstrip(b"\xef\xbb\xbf \t\r\n")
    return head if head[:1] in (b"{", b"[") else None


_JSON_SNIFF = 1 << 16


def check_trace_file(path: str | os.PathLike[str], json_ok: bool = False) -> Path:
    """`path`, if it is a readable, non-empty regular file that is no JSON (`json_ok`: or
    JSON, for the UI, which reads it itself); else a TraceOpenError of one line (a
    directory, a FIFO, which is never opened, a file this user cannot read, a PyTorch
    profiler JSON that `convert` makes a trace of: the engine would read it as a trace
    without GPU tracks, and every answer would be empty)."""
    try:
        trace_path = check_input(path)
    except FileError as exc:
        raise TraceOpenError(str(exc)) from None
    if trace_path.stat().st_size == 0:
        raise TraceOpenError(f"trace file is empty: {trace_path}")
    start = None if json_ok or starts_framed(trace_path) else _json_start(trace_path)
    if start is not None and b'"traceEvents"' in start:
        raise TraceOpenError(
            f"not a Perfetto trace: {trace_path} is a PyTorch profiler (Kineto) JSON trace; "
            f"convert it first (`xpu-perf convert {trace_path}`) and give the "
            ".perfetto-trace it writes"
        )
    if start is not None:
        raise TraceOpenError(
            f"not a Perfetto trace: {trace_path} is JSON; xpu-perf reads Perfetto traces "
            "(`xpu-perf record`'s, or `xpu-perf convert`'s of a PyTorch profiler JSON)"
        )
    return trace_path


def check_complete(path: str | os.PathLike[str]) -> None:
    """For a Perfetto protobuf trace: that its last packet ends at the end of the file (the
    check open_trace makes while loading), for a reader that does not load it (`view`)."""
    trace_path = check_trace_file(path, json_ok=True)
    if not _looks_like_proto(trace_path):
        return
    for _ in _chunks(trace_path, _FramingCheck()):
        pass


def resolve_shell(shell: str | os.PathLike[str] | None) -> Path | None:
    value = shell or os.environ.get(ENV_SHELL)
    if not value:
        return None
    path = Path(value)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise TraceOpenError(f"trace_processor_shell not found or not executable: {path}")
    return path


def open_trace(path: str | os.PathLike[str], shell: str | os.PathLike[str] | None = None) -> Trace:
    """Load a trace file into trace_processor (native shell if given, else embedded)."""
    from perfetto.trace_processor import TraceProcessor, TraceProcessorConfig
    from perfetto.trace_processor.api import TraceProcessorException

    trace_path = check_trace_file(path)
    shell_path = resolve_shell(shell)
    if shell_path is not None:
        try:
            tp: TraceProcessor = TraceProcessor(
                trace=str(trace_path), config=TraceProcessorConfig(bin_path=str(shell_path))
            )
        except TraceProcessorException as exc:
            raise TraceOpenError(f"cannot read {trace_path}: {_one_line(str(exc))}") from None
        return Trace(tp)
    from exporters.perfetto.engine.wasm_backend import EmbeddedTraceProcessor
    from exporters.perfetto.engine.wasm_engine import WasmEngineError

    try:
        framing = _FramingCheck() if _looks_like_proto(trace_path) else None
        tp = EmbeddedTraceProcessor(trace=_chunks(trace_path, framing))
    except TraceProcessorException as exc:
        raise TraceOpenError(f"cannot read {trace_path}: {_one_line(str(exc))}") from None
    except EngineMemoryError:
        size = trace_path.stat().st_size / 1e6
        raise TraceOpenError(too_big(f"cannot load {trace_path} ({size:.0f} MB)")) from None
    except WasmEngineError as exc:
        raise TraceOpenError(str(exc)) from None
    return Trace(tp)
