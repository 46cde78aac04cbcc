"""`convert` on hostile JSON (issue 34 C1-C3), at small sizes of the shapes that
bench/hostile_json.py measures at full size: deep nesting, long strings, many args, and
instants or flow events with no complete event among them.  Each is converted (read back
through trace_processor) or refused in one line, whichever path the reader takes (orjson's
runs, or ijson where orjson cannot vouch for the file)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from collector import model
from collector.sources import json_limits, kineto, kineto_columns
from collector.sources.json_limits import MAX_DEPTH, MAX_EVENT_BYTES, MAX_MEMBERS
from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import run_cli
from .kineto_reference import convert_events

_HEAD = '{"ph":"X","pid":1,"tid":1,"ts":1,"dur":1,'


def _event(name: str, args: str | None = None) -> str:
    """A complete event's JSON text: `name` and `args` as JSON texts."""
    return _HEAD + '"name":' + name + ("" if args is None else ',"args":' + args) + "}"


def _instant(name: str, tid: str, ts: int) -> str:
    return '{"ph":"i","s":"t","name":"' + name + '","pid":1,"tid":' + tid + ',"ts":' + str(ts) + "}"


# A lone surrogate, which orjson rejects: ijson reads the whole file (kineto_json.py).
_LONG_INT = '{"ph":"X","cat":"cpu_op","name":"lone \\ud800","pid":1,"tid":1,"ts":5,"dur":1}'


def _doc(events: list[str], ijson_path: bool = False) -> str:
    slices = [
        json.dumps({"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": 10 + i, "dur": 1})
        for i in range(50)
    ]
    return (
        '{"traceEvents":[' + ",".join(slices + ([_LONG_INT] if ijson_path else []) + events) + "]}"
    )


def _convert(tmp_path: Path, text: str | bytes, gz: bool = False):  # type: ignore[no-untyped-def]
    data = text.encode() if isinstance(text, str) else text
    src = tmp_path / ("in.json.gz" if gz else "in.json")
    src.write_bytes(gzip.compress(data, 1) if gz else data)
    out = tmp_path / "out.perfetto-trace"
    out.unlink(missing_ok=True)  # (a conversion before this one's)
    return run_cli("convert", src, "-o", out, "--no-progress"), out


def _refused(proc, what: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode != 0
    assert not Path(proc.args[proc.args.index("-o") + 1]).exists()  # no half-written output
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "refused: " in proc.stderr
    assert what in proc.stderr, proc.stderr


@pytest.mark.parametrize("ijson_path", [False, True], ids=["orjson", "ijson"])
def test_nesting_up_to_the_limit_converts_and_past_it_is_refused(
    tmp_path: Path, ijson_path: bool
) -> None:
    # Levels below the top object: the events array, the event, its args, then the value.
    deepest = MAX_DEPTH - 3
    value = "[" * deepest + "]" * deepest
    ok = _event('"deep"', '{"v":' + value + "}")
    proc, out = _convert(tmp_path, _doc([ok], ijson_path))
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        text = t.scalar(
            "select display_value from args join slice using (arg_set_id) "
            "where slice.name = 'deep' and key = 'debug.v'"
        )
    assert text == value
    deeper = ok.replace(value, "[" + value + "]")
    proc, _ = _convert(tmp_path, _doc([deeper], ijson_path))
    _refused(proc, f"JSON nested deeper than {MAX_DEPTH:,} levels")


@pytest.mark.parametrize("depth", [2_000, 200_000])
def test_deep_documents_are_refused_in_one_line(tmp_path: Path, depth: int) -> None:
    inside = '{"traceEvents":[{"ph":"X","name":"a","pid":1,"tid":1,"ts":1,"dur":1,"args":{"a":'
    for text in (inside + "[" * depth + "]" * depth + "}}]}", "[" * depth + "]" * depth):
        proc, _ = _convert(tmp_path, text, gz=True)
        _refused(proc, f"JSON nested deeper than {MAX_DEPTH:,} levels")


def test_a_name_nested_as_deep_as_allowed_converts(tmp_path: Path) -> None:
    """A name that is no string is written as its text: that recursed past Python's limit."""
    deepest = MAX_DEPTH - 2
    name = "[" * deepest + "]" * deepest
    proc, out = _convert(tmp_path, _doc([_event(name)]))
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice where name like '[[[[%'") == 1


@pytest.mark.parametrize("ijson_path", [False, True], ids=["orjson", "ijson"])
def test_strings_and_events_past_the_limit_are_refused(tmp_path: Path, ijson_path: bool) -> None:
    fits = "n" * (MAX_EVENT_BYTES // 2)
    proc, out = _convert(tmp_path, _doc([_event(f'"{fits}"')], ijson_path))
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        assert t.scalar("select max(length(name)) from slice") == len(fits)
    long = "n" * (MAX_EVENT_BYTES + 1)
    proc, _ = _convert(
        tmp_path,
        _doc([_event(f'"{long}"')], ijson_path),
        gz=True,
    )
    _refused(proc, "a string longer than")
    # Many short strings: the event, not one string, is too long.
    many = ",".join(f'"{i}"' for i in range(MAX_MEMBERS - 1))
    big = _event(
        '"a"',
        "{" + ",".join(f'"k{j}":[{many}]' for j in range(MAX_EVENT_BYTES // len(many) + 1)) + "}",
    )
    proc, _ = _convert(tmp_path, _doc([big], ijson_path), gz=True)
    _refused(proc, "an event of more than")


@pytest.mark.parametrize("ijson_path", [False, True], ids=["orjson", "ijson"])
@pytest.mark.parametrize("container", ["args", "list"])
def test_too_many_args_are_refused(tmp_path: Path, ijson_path: bool, container: str) -> None:
    def event(n: int) -> str:
        if container == "args":
            inner = "{" + ",".join(f'"k{i}":{i}' for i in range(n)) + "}"
        else:
            inner = '{"dims":[' + ",".join(str(i) for i in range(n)) + "]}"
        return _event('"many"', inner)

    proc, out = _convert(tmp_path, _doc([event(MAX_MEMBERS)], ijson_path))
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        n_args = t.scalar(
            "select count(*) from args join slice using (arg_set_id) where slice.name = 'many'"
        )
    assert n_args >= (MAX_MEMBERS if container == "args" else 1)
    proc, _ = _convert(tmp_path, _doc([event(MAX_MEMBERS + 1)], ijson_path))
    _refused(proc, f"more than {MAX_MEMBERS:,} members")


def test_duplicate_keys_count_as_members_on_both_paths(tmp_path: Path) -> None:
    """orjson keeps the last of a repeated key: the limit is on the text, as the guard
    reads it, so both paths refuse the same file."""
    dup = _event('"d"', "{" + ",".join(['"k":1'] * (MAX_MEMBERS + 1)) + "}")
    for ijson_path in (False, True):
        proc, _ = _convert(tmp_path, _doc([dup], ijson_path))
        _refused(proc, f"more than {MAX_MEMBERS:,} members")


def _held_while_streaming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, events: list[str], attr: str
) -> tuple[int, kineto.ConvertStats, list[object]]:
    """Convert in this process with kineto_columns.`attr` set low; the most input events
    read ahead of the first event that comes out."""
    monkeypatch.setattr(kineto_columns, attr, 500)
    src = tmp_path / "s.json"
    src.write_text('{"traceEvents":[' + ",".join(events) + "]}")
    read = 0
    real = kineto.event_runs

    def counting(*a, **k):  # type: ignore[no-untyped-def]
        nonlocal read
        for run in real(*a, **k):
            read += len(run)
            yield run

    monkeypatch.setattr(kineto, "event_runs", counting)
    stats = kineto.ConvertStats()
    out = []
    first_at = None
    for event in kineto_columns.convert_columns(src, kineto.Head(), stats):
        if first_at is None:
            first_at = read
        out.append(event)
    assert first_at is not None
    return first_at, stats, out


def test_instants_alone_stream(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    n = 20_000
    events = [_instant(f"m{i}", "2", i) for i in range(n)]
    first_at, stats, out = _held_while_streaming(tmp_path, monkeypatch, events, "OTHERS_HELD")
    assert first_at < 5_000  # held: about OTHERS_HELD and a run, not the whole input
    assert stats.instants == n == len(out)
    assert [e.name for e in out] == [f"m{i}" for i in range(n)]  # type: ignore[attr-defined]


def test_instants_among_few_slices_keep_their_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Text tids are numbered in input order: instants written early keep the numbering
    of the slices around them, as the reference (tests/kineto_reference.py) has it."""
    events = []
    for i in range(3_000):
        tid = f'"T{i // 1000}"'
        if i % 100 == 0:
            x = {"ph": "X", "name": f"x{i}", "pid": 1, "tid": f"T{i // 1000}", "ts": i, "dur": 1}
            events.append(json.dumps(x))
        events.append(_instant("m", tid, i))
    first_at, _, out = _held_while_streaming(tmp_path, monkeypatch, events, "OTHERS_HELD")
    assert first_at < 1_500
    objects = list(convert_events(tmp_path / "s.json", kineto.Head(), kineto.ConvertStats()))
    # Slices come out in batches (the writer's one way in); the reference's are objects.
    written = [s for e in out for s in (e.slices() if isinstance(e, model.SliceBatch) else [e])]
    key = lambda e: (type(e).__name__, repr(e))  # noqa: E731
    assert sorted(map(key, written)) == sorted(map(key, objects))


def test_flow_events_alone_stream_and_are_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    n = 6_000
    events = [
        json.dumps({"ph": "sf"[i % 2], "cat": "ac2g", "id": i // 2, "pid": 1, "tid": 1, "ts": i})
        for i in range(n)
    ] + [_instant("end", "1", 1)]
    most = 0
    real = kineto_columns._FlowEnds.held

    def held(self) -> int:  # type: ignore[no-untyped-def]
        nonlocal most
        most = max(most, real(self))
        return most if most < 0 else real(self)

    monkeypatch.setattr(kineto_columns._FlowEnds, "held", held)
    _, stats, _ = _held_while_streaming(tmp_path, monkeypatch, events, "FLOW_ENDS_HELD")
    # Every pair made no flow: each counted once, as the object path counts them.
    objects = kineto.ConvertStats()
    list(convert_events(tmp_path / "s.json", kineto.Head(), objects))
    assert sum(objects.skipped.values()) == sum(stats.skipped.values()) == n // 2
    assert most < 2_000  # held: about twice FLOW_ENDS_HELD and a run, not all 6,000


def test_guard_scans_split_input_as_whole() -> None:
    """The guard keeps its state across reads: a string, an escape or a nesting split
    between two reads counts as one."""
    text = ('{"traceEvents":[{"name":"a\\"b' + "x" * 100 + '","args":{"k":[[1]]}}]}').encode()
    for cut in range(len(text)):
        guard = json_limits.JsonGuard()
        guard.feed(text[:cut])
        guard.feed(text[cut:])
    long = b'{"a":"\\' + b"x" * MAX_EVENT_BYTES + b'"}'
    for cut in (6, 7, 8, len(long) - 3):
        with pytest.raises(json_limits.LimitExceeded, match="a string longer"):
            guard = json_limits.JsonGuard()
            guard.feed(long[:cut])
            guard.feed(long[cut:])
    with pytest.raises(json_limits.LimitExceeded):
        json_limits.check_text(b'{"a":"' + b"x" * (MAX_EVENT_BYTES + 1) + b'"}')
    json_limits.check_text(json.dumps({"a": "x" * (MAX_EVENT_BYTES - 8)}).encode())
