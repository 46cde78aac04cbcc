"""kineto_json.trace_events yields what ijson.items(f, "traceEvents.item") yields, with the
same errors, for documents built to fool its cuts (boundaries inside strings and nested
args), what orjson reads otherwise (long integers, lone surrogates), and broken files."""

from __future__ import annotations

import gzip
import io
import json
import random
from typing import IO, Any

import ijson
import pytest

from collector.sources import kineto_json


def _opener(data: bytes, gz: bool = False):  # type: ignore[no-untyped-def]
    def open_file() -> tuple[IO[bytes], IO[bytes]]:
        raw = io.BytesIO(gzip.compress(data) if gz else data)
        stream = gzip.GzipFile(fileobj=raw) if gz else raw
        return stream, raw  # type: ignore[return-value]

    return open_file


def _read(read: Any) -> tuple[list[Any], str | None]:
    items: list[Any] = []
    try:
        for item in read:
            items.append(item)
    except Exception as exc:  # the error's kind and text, compared below
        return items, f"{type(exc).__name__}: {exc}"
    return items, None


def _same_as_ijson(data: bytes, gz: bool = False) -> list[Any]:
    open_file = _opener(data, gz)
    expected_items, expected_error = _read(
        ijson.items(open_file()[0], "traceEvents.item", use_float=True)
    )
    items, error = _read(kineto_json.trace_events(open_file))
    assert error == expected_error
    if error is None:
        assert items == expected_items
        # Equal values of other types would compare equal (1 == 1.0 == True).
        assert repr(items) == repr(expected_items)
    else:  # the items before the error are ijson's (the consumer fails there anyway)
        assert items[: len(expected_items)] == expected_items
    return items


def _events(n: int, seed: int = 0) -> list[dict[str, Any]]:
    rnd = random.Random(seed)
    tricky_names = [
        'a}, {"b": 1',  # a boundary candidate inside a string
        "x\\y",
        "\u00e9\u4e2d",
        '}, {"ph": "X"}, {',
    ]
    events = []
    for i in range(n):
        ev: dict[str, Any] = {
            "ph": "X",
            "cat": "cpu_op",
            "name": rnd.choice(tricky_names) if i % 7 == 0 else f"op{i % 13}",
            "pid": 1,
            "tid": 2,
            "ts": 1000.0 + i * 1.125,
            "dur": rnd.choice([0.5, 1, 2.25, -0.0]),
            "args": {"External id": i, "Input Dims": [[1, 2], []]},
        }
        if i % 5 == 0:
            ev["args"]["nested"] = [{"a": 1}, {"b": {"c": [1.5, True, None]}}]  # `}, {` in args
        events.append(ev)
    return events


def _document(events: list[Any], head: str = '"schemaVersion": 1, ', tail: str = "") -> bytes:
    body = ",\n".join(json.dumps(e) for e in events)
    return f'{{{head}"traceEvents": [\n{body}\n]{tail}}}'.encode()


@pytest.mark.parametrize("n", [0, 1, 2, 3000])
@pytest.mark.parametrize("gz", [False, True])
def test_items_as_ijson(n: int, gz: bool) -> None:
    items = _same_as_ijson(_document(_events(n), tail=', "traceName": "t"'), gz)
    assert len(items) == n


def test_compact_and_spaced_layouts() -> None:
    events = _events(2000, seed=3)
    compact = json.dumps({"traceEvents": events}, separators=(",", ":")).encode()
    spaced = json.dumps({"a": [1, {"b": "}, {"}], "traceEvents": events, "z": {}}, indent=4)
    assert len(_same_as_ijson(compact)) == 2000
    assert len(_same_as_ijson(spaced.encode())) == 2000


def test_long_integers_read_as_ijson_reads_them() -> None:
    events = _events(3000)
    events[10]["args"]["big"] = 2**63 + 5  # ijson: integer overflow; orjson: an int
    _same_as_ijson(_document(events))
    events[10]["args"]["big"] = 10**30  # orjson: a float
    _same_as_ijson(_document(events))
    events[10]["args"]["big"] = 2**62  # 19 digits, int64: read by ijson, the same ints
    events[20]["name"] = "1234567890123456789012"  # digits in a string
    assert _same_as_ijson(_document(events))[10]["args"]["big"] == 2**62


def test_what_orjson_rejects_goes_to_ijson() -> None:
    events = _document(_events(3000)).replace(b'"op5"', b'"op\\ud800"', 1)  # lone surrogate
    _same_as_ijson(events)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"traceEvents": {}}',
        b'{"traceEvents": [1, 2, {"a": 1}], "x": [}',
        b'{"x": "\\"traceEvents\\": [", "traceEvents": [{"a": 1}]}',
        b'{"x": {"traceEvents": [{"a": 2}]}, "traceEvents": [{"a": 1}]}',
        b'{"traceEvents": [{"a": 1}], "traceEvents": [{"a": 2}]}',
        b'{"trace\\u0045vents": [{"a": 0}], "traceEvents": [{"a": 1}]}',
        b'{"traceEvents": [{"a": 1}]}  trailing',
        b'{"traceEvents": [{"a": 1}, {"a": NaN}]}',
        b'{"traceEvents": [{"a": 1e400}]}',
        b'\xef\xbb\xbf{"traceEvents": [{"a": 1}]}',
        b'{"traceEvents": [{"a": "\xff"}]}',
    ],
)
def test_odd_documents(data: bytes) -> None:
    _same_as_ijson(data)


def test_truncated_files() -> None:
    data = _document(_events(5000))
    for cut in (len(data) // 3, len(data) - 2):
        _same_as_ijson(data[:cut])
    whole = gzip.compress(data)

    def truncated_gzip() -> tuple[IO[bytes], IO[bytes]]:
        raw = io.BytesIO(whole[: len(whole) // 2])
        return gzip.GzipFile(fileobj=raw), raw  # type: ignore[return-value]

    expected = _read(ijson.items(truncated_gzip()[0], "traceEvents.item", use_float=True))[1]
    assert expected is not None
    assert _read(kineto_json.trace_events(truncated_gzip))[1] == expected


def test_progress_counts_the_file_once() -> None:
    data = _document(_events(3000))
    seen: list[int] = []
    _read(kineto_json.trace_events(_opener(data), seen.append))
    assert sum(seen) == len(data)


def test_ijson_reads_again_only_where_needed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fast reader's runs are taken (no second read) for a file with tricky strings,
    args and tail; a long integer sends ijson to its run alone; a lone surrogate to the
    file."""
    prefixes: list[str] = []
    items = ijson.items

    def counted(stream: IO[bytes], prefix: str, **kw: Any) -> Any:
        prefixes.append(prefix)
        return items(stream, prefix, **kw)

    monkeypatch.setattr(kineto_json.ijson, "items", counted)
    events = _events(3000)
    _same_as_ijson(_document(events))
    assert prefixes == ["traceEvents.item"]  # _same_as_ijson's own reading
    prefixes.clear()
    _same_as_ijson(_document(events, tail=', "ranks": [{"a": 1}, {"b": [{"c": 2}, {}]}]'))
    assert prefixes == ["traceEvents.item"]  # a `}, {` after the array: its end found
    prefixes.clear()
    events[10]["args"]["big"] = 2**62  # 19 digits: ijson reads that run, the rest is fast
    _same_as_ijson(_document(events))
    assert prefixes == ["traceEvents.item", "item"]
    prefixes.clear()
    _same_as_ijson(_document(_events(3000)).replace(b'"op5"', b'"op\\ud800"', 1))
    assert prefixes == ["traceEvents.item", "traceEvents.item"]


def test_a_long_head_and_tail() -> None:
    """Metadata of several MiB before and after the events (read past one block)."""
    info = json.dumps([f"line {i} }}, {{" for i in range(100_000)])
    items = _same_as_ijson(
        _document(_events(3000), head=f'"INFO": {info}, ', tail=f', "ERROR": {info}')
    )
    assert len(items) == 3000
