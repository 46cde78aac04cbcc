"""Trace.query_columns reads the decoded cells a column at a time; the rows must be those
the perfetto package's own row iterator gives, cell for cell and type for type."""

from __future__ import annotations

from pathlib import Path

from exporters.perfetto.engine.trace_processor import open_trace

STATEMENTS = [
    # ints, strings, NULLs (a slice's parent, a missing arg) and floats, many rows
    "select id, ts, dur, name, category, parent_id, dur * 1.5 as x, "
    "extract_arg(arg_set_id, 'debug.bytes') as bytes from slice order by id",
    "select count(*) as n from slice",
    "select id from slice where 0",  # no rows
    "select null as a, 'x' as b, 2.5 as c, x'00ff' as d",
]


def test_rows_are_the_iterators_cells(example_trace: Path) -> None:
    with open_trace(example_trace) as t:
        for sql in STATEMENTS:
            columns, rows = t.query_columns(sql)
            result = t._tp.query(sql)
            expected = [tuple(getattr(r, c) for c in result.column_names) for r in result]
            assert columns == list(result.column_names)
            assert rows == expected, sql
            assert [[type(v) for v in r] for r in rows] == [
                [type(v) for v in r] for r in expected
            ], sql
        # the slice query has thousands of rows, NULLs and floats among them
        _, rows = t.query_columns(STATEMENTS[0])
        assert len(rows) > 1000
        assert any(r[5] is None for r in rows) and any(isinstance(r[6], float) for r in rows)
