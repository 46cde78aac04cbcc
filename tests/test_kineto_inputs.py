"""What `convert` and the trace readers say of inputs that are not what they read (issue 34:
a Kineto JSON given to report/query/folded, a Perfetto trace or no trace given to convert,
`traceEvents` items that are no object, raw bytes in JSON errors), and a NUL inside a
Kineto name (L8): kept whole, read back through trace_processor."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import EXAMPLE, run_cli

# A lone surrogate, which orjson rejects: ijson reads the whole file (kineto_json.py).
_LONG_INT = {"ph": "X", "name": "lone \ud800", "pid": 1, "tid": 1, "ts": 9, "dur": 1}


def _one_line_error(proc) -> str:  # type: ignore[no-untyped-def]
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "b'" not in lines[0] and "\\x" not in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("command", ["report", "query", "folded"])
def test_readers_refuse_a_kineto_json_naming_convert(tmp_path: Path, command: str) -> None:
    plain = tmp_path / "trace.json"
    plain.write_bytes(gzip.decompress(EXAMPLE.read_bytes()))
    for src in (EXAMPLE, plain):
        args = [command, src] + (["select count(*) from slice"] if command == "query" else [])
        line = _one_line_error(run_cli(*args))
        assert "PyTorch profiler (Kineto) JSON" in line
        assert f"xpu-perf convert {src}" in line
    other = tmp_path / "other.json"
    other.write_text('{"a": [1, 2]}')
    line = _one_line_error(run_cli("report", other))
    assert "is JSON" in line and "Perfetto" in line


def test_convert_of_a_perfetto_trace_says_it_is_one(tmp_path: Path) -> None:
    trace = tmp_path / "t.perfetto-trace"
    run_cli("convert", EXAMPLE, "-o", trace, check=True)
    line = _one_line_error(run_cli("convert", trace, "-o", tmp_path / "again.perfetto-trace"))
    assert "already a Perfetto trace" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.perfetto-trace"]


@pytest.mark.parametrize(
    "data, what",
    [
        (bytes(range(256)) * 8, "not valid JSON: it is binary data"),
        (b"hello, world\n", "not valid JSON: it is plain text"),
        (b'{"traceEvents":[{"ph":"X","name":"a"} \xeb\xba ]}', "not valid JSON"),
        (b'{"traceEvents":[{"ph":"X","name":"a\xeb\xba', "not valid JSON"),
        (b'{"traceEvents":[{"ph":"X","name":"a\x01b"}]}', "not valid JSON"),
    ],
    ids=["binary", "text", "bad-bytes", "bad-utf8", "control"],
)
@pytest.mark.parametrize("gz", [False, True])
def test_no_trace_says_what_it_is_not_and_what_is_expected(
    tmp_path: Path, data: bytes, what: str, gz: bool
) -> None:
    src = tmp_path / "in.json"
    src.write_bytes(gzip.compress(data) if gz else data)
    line = _one_line_error(run_cli("convert", src, "-o", tmp_path / "o.perfetto-trace"))
    assert what in line
    if "it is" in what:
        assert "'traceEvents' array" in line  # what convert reads


def test_items_that_are_no_object_are_counted(tmp_path: Path) -> None:
    src = tmp_path / "n.json"
    src.write_text('{"traceEvents":[1,2,"x",null]}')
    proc = run_cli("convert", src, "-o", tmp_path / "n.perfetto-trace", check=True)
    assert "skipped 4: 'traceEvents' items that are no object" in proc.stderr
    assert "events in 4, out 0" in proc.stderr
    mixed = tmp_path / "m.json"
    event = {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}
    mixed.write_text(json.dumps({"traceEvents": [1, event, [event], None]}))
    out = tmp_path / "m.perfetto-trace"
    proc = run_cli("convert", mixed, "-o", out, check=True)
    assert "skipped 3: 'traceEvents' items that are no object" in proc.stderr
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice where name = 'a'") == 1


@pytest.mark.parametrize("ijson_path", [False, True], ids=["orjson", "ijson"])
def test_a_nul_in_a_name_is_kept_whole(tmp_path: Path, ijson_path: bool) -> None:
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "a\0b", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"k\0": "v\0w", "dims": ["x\0"]}},
        {"ph": "X", "cat": "kernel", "name": "k\0ernel", "pid": 0, "tid": 7, "ts": 2, "dur": 1,
         "args": {"device": 0, "stream": 7}},
        {"ph": "i", "s": "t", "name": "i\0j", "pid": 1, "tid": 1, "ts": 3},
        {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "t\0x"}},
    ] + ([_LONG_INT] if ijson_path else [])  # fmt: skip
    src = tmp_path / "nul.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "nul.perfetto-trace"
    run_cli("convert", src, "-o", out, check=True)
    with open_trace(out) as t:
        names = {r["name"] for r in t.query("select name from slice")}
        assert {"a\\u0000b", "k\\u0000ernel", "i\\u0000j"} <= names
        args = {
            (r["key"], r["display_value"])
            for r in t.query(
                "select key, display_value from args join slice using (arg_set_id) "
                "where slice.name = 'a\\u0000b'"
            )
        }
        assert ("debug.k\\u0000", "v\\u0000w") in args
        assert ("debug.dims", '["x\\\\u0000"]') in args  # the list's JSON text
        assert t.scalar("select count(*) from thread where name = 't\\u0000x'") == 1


def _packet_of(size: int) -> bytes:
    """A real TracePacket (a named track) of exactly `size` bytes."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    for k in range(size):
        packet = pb.TracePacket()
        packet.trusted_packet_sequence_id = 1
        packet.track_descriptor.uuid = 5
        packet.track_descriptor.name = "x" * k
        if packet.ByteSize() == size:
            return packet.SerializeToString()
    raise AssertionError(f"no packet of {size} bytes")


@pytest.mark.parametrize("size", [ord("{"), ord("[")])
def test_a_trace_whose_first_packet_frames_like_json_is_a_trace(tmp_path: Path, size: int) -> None:
    """A Perfetto trace starts with the packet tag 0x0a (a newline) and the first packet's
    length: 123 reads as `{` and 91 as `[`, so such a trace (a real recording, once) was
    refused as JSON by every reader."""
    first, second = _packet_of(size), _packet_of(40)
    trace = tmp_path / "t.perfetto-trace"
    trace.write_bytes(b"\x0a" + bytes([size]) + first + b"\x0a" + bytes([40]) + second)
    proc = run_cli("query", trace, "select count(*) as n from track where name glob 'xxx*'")
    assert proc.returncode == 0, proc.stderr
    # JSON that starts with a newline is still JSON.
    text = tmp_path / "t.json"
    text.write_text('\n{"a": [1, 2]}\n')
    assert "is JSON" in _one_line_error(run_cli("report", text))


def test_convert_of_a_trace_whose_first_packet_frames_like_json_says_it_is_one(
    tmp_path: Path,
) -> None:
    first, second = _packet_of(ord("{")), _packet_of(40)
    trace = tmp_path / "t.perfetto-trace"
    trace.write_bytes(b"\x0a\x7b" + first + b"\x0a" + bytes([40]) + second)
    line = _one_line_error(run_cli("convert", trace, "-o", tmp_path / "again.perfetto-trace"))
    assert "already a Perfetto trace" in line
