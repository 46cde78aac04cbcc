"""Property test of `convert` on random and mutated Kineto JSON: never a traceback; exit 0
with a whole trace, or non-zero with one line and no output at all.

Mutations start from small real traces (tests/data/kineto_outside/): keys dropped, values of
the wrong type, huge and negative numbers, bad stream ids, truncated text.  `convert` runs
in-process (collector.cli.main), so each example costs milliseconds, not an interpreter.
"""

from __future__ import annotations

import copy
import gzip
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from collector import cli
from exporters.perfetto.engine.trace_processor import _FramingCheck, open_trace

from .conftest import REPO, load_kineto

DATA = REPO / "tests" / "data" / "kineto_outside"
BASES: list[dict[str, Any]] = []
for _name in ("pytorch18_async_gpu", "cuda_event_sync", "cuda_triton_driver_launch",
              "rocm_mi250_minitoy_train", "mtia_inference_rank_0"):  # fmt: skip
    _doc = load_kineto(DATA / f"{_name}.json.gz")
    _doc["traceEvents"] = _doc["traceEvents"][:120]
    BASES.append(_doc)

EVENT_KEYS = ("ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s")
ARG_KEYS = ("device", "stream", "correlation", "External id", "grid", "block", "name")
ODD_VALUES = st.sampled_from(
    [4294967295, -1, -(2**31) - 1, 2**31, 2**63, -(2**63) - 1, 2**64, 10**30, 1e300, -1e300,
     -5.5, 0, "0x0", "0xZZ", "", "X", "s", "f", "ac2g", "kernel", "mtia_ccp_events",
     "cuda_runtime", "\udcff"[:0] + "\u2603"]
)  # fmt: skip
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
VALUES = st.one_of(ODD_VALUES, JSON_VALUES)


@st.composite
def mutated_trace(draw: st.DrawFn) -> bytes:
    doc = copy.deepcopy(draw(st.sampled_from(BASES)))
    events = doc["traceEvents"]
    for _ in range(draw(st.integers(1, 12))):
        if not events:
            break
        i = draw(st.integers(0, len(events) - 1))
        ev = events[i]
        if not isinstance(ev, dict):
            continue  # replaced by a non-event before
        op = draw(st.sampled_from(["drop", "set", "arg_drop", "arg_set", "dup", "replace"]))
        if op == "drop":
            ev.pop(draw(st.sampled_from(EVENT_KEYS)), None)
        elif op == "set":
            ev[draw(st.sampled_from(EVENT_KEYS))] = draw(VALUES)
        elif op in ("arg_drop", "arg_set") and isinstance(ev.get("args"), dict):
            key = draw(st.sampled_from(ARG_KEYS))
            if op == "arg_drop":
                ev["args"].pop(key, None)
            else:
                ev["args"][key] = draw(VALUES)
        elif op == "dup":
            events.insert(draw(st.integers(0, len(events))), copy.deepcopy(ev))
        elif op == "replace":
            events[i] = draw(VALUES)
    if draw(st.integers(0, 9)) == 0:
        doc["deviceProperties"] = draw(VALUES)
    text = json.dumps(doc).encode()
    if draw(st.integers(0, 7)) == 0:
        text = text[: draw(st.integers(1, len(text)))]
    return text


@st.composite
def random_trace(draw: st.DrawFn) -> bytes:
    events = draw(
        st.lists(
            st.dictionaries(
                st.sampled_from(EVENT_KEYS), VALUES | st.sampled_from(["X", "i", "M", "s", "f"])
            ),
            max_size=8,
        )
    )
    doc = draw(st.one_of(st.just({"traceEvents": events}), JSON_VALUES))
    return json.dumps(doc).encode()


def _convert(
    base: Path, text: bytes, gz: bool, capsys: pytest.CaptureFixture[str], fuzz: bool = True
) -> None:
    tmp_path = Path(tempfile.mkdtemp(dir=base))  # one per example: tmp_path is per test
    src = tmp_path / ("in.json.gz" if gz else "in.json")
    src.write_bytes(gzip.compress(text, mtime=0) if gz else text)
    out = tmp_path / "out.perfetto-trace"
    out.unlink(missing_ok=True)
    capsys.readouterr()
    code = cli.main(["convert", str(src), "-o", str(out), "--no-progress", "-q"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [src.name] + ([out.name] if code == 0 else [])
    ), "a failed convert left output, or a .tmp was left behind"
    if fuzz:
        event("converted" if code == 0 else "refused: " + err.split(": ")[-1][:30])
    if code != 0:
        assert len(err.strip().splitlines()) == 1, err
        assert err.startswith("xpu-perf convert: error: ")
        shutil.rmtree(tmp_path)
        return
    assert err == ""
    # A whole trace: every packet framed to the last byte (what trace_processor cannot tell).
    framing = _FramingCheck()
    framing.feed(out.read_bytes())
    framing.check_complete(out)
    shutil.rmtree(tmp_path)


FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)


@FUZZ
@given(text=mutated_trace(), gz=st.booleans())
def test_convert_mutated_traces(tmp_path: Path, capsys, text: bytes, gz: bool) -> None:
    _convert(tmp_path, text, gz, capsys)


@FUZZ
@given(text=random_trace(), gz=st.booleans())
def test_convert_random_json(tmp_path: Path, capsys, text: bytes, gz: bool) -> None:
    _convert(tmp_path, text, gz, capsys)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("cut", [0, 1, 100, -1])
def test_truncated_input_is_one_line(tmp_path: Path, capsys, cut: int, gz: bool) -> None:
    text = json.dumps(BASES[0]).encode()[:cut]
    _convert(tmp_path, text, gz, capsys, fuzz=False)


def test_a_mutated_trace_converts_and_opens(tmp_path: Path, capsys) -> None:
    """The conversions above are checked for framing only (speed); one full read here."""
    doc = copy.deepcopy(BASES[1])
    doc["traceEvents"][5]["args"] = {"stream": "0xZZ", "device": 2**62}
    doc["traceEvents"][6]["dur"] = -3
    src = tmp_path / "m.json"
    src.write_text(json.dumps(doc))
    out = tmp_path / "m.perfetto-trace"
    assert cli.main(["convert", str(src), "-o", str(out), "--no-progress", "-q"]) == 0
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice") > 0
