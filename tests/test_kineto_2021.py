"""`convert` on Kineto's 2021 layout (issue 37 item 6): its `async`/`launch` flow pairs,
text tids ("5504", "stream 7") and, where a pair is missing, the `correlation` args link
API calls to device ops; each op without a link is counted.  And names that say what one
run only knew (an object's address, a line 0) are written without it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from . import kineto_2021
from .conftest import run_cli
from .convert_compare import compare


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    work = tmp_path_factory.mktemp("k2021")
    src = work / "worker0.pt.trace.json"
    launches = kineto_2021.write(src)
    out = work / "worker0.perfetto-trace"
    proc = run_cli("convert", src, "-o", out, check=True)
    return src, out, launches, proc.stderr


def test_launch_flows_and_correlations_link_every_op(converted) -> None:  # type: ignore[no-untyped-def]
    _, out, launches, summary = converted
    summary = " ".join(summary.split())  # (the console wraps its lines)
    linked = launches.with_flow_pair + launches.correlation_only
    assert f"flows: {linked} API->GPU" in summary
    assert f"GPU ops without an API call: {launches.without_api_call}" in summary
    assert "skipped" not in summary.replace("skipped 1: GPU process/stream labels", "")
    with open_trace(out) as t:
        ops = t.query(
            "select g.id, count(f.id) n, min(a.category) api_category, "
            "min(ga.int_value = aa.int_value) same_corr from slice g "
            "left join flow f on f.slice_in = g.id left join slice a on a.id = f.slice_out "
            "left join args ga on ga.arg_set_id = g.arg_set_id "
            "  and ga.key = 'debug.correlation_id' "
            "left join args aa on aa.arg_set_id = a.arg_set_id "
            "  and aa.key = 'debug.correlation_id' "
            "where g.category in ('kernel', 'memcpy') group by g.id"
        )
        assert len(ops) == len(launches.corr_of_ops)
        assert sum(r["n"] == 1 for r in ops) == linked
        assert sum(r["n"] == 0 for r in ops) == launches.without_api_call
        assert {r["api_category"] for r in ops if r["n"]} == {"cuda_api"}
        assert all(r["same_corr"] == 1 for r in ops if r["n"])
        # The API calls are on the thread of the operators that made them ("5504" is 5504).
        threads = t.query(
            "select distinct t.tid, t.name from slice s join thread_track tt on s.track_id = tt.id "
            "join thread t using (utid) where s.category in ('cuda_api', 'Operator')"
        )
        assert [(r["tid"], r["name"]) for r in threads] == [(5504, "thread 5504 (python)")]


def test_both_conversions_agree_on_the_2021_layout(converted, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    src = converted[0]
    for part, (_, _, only_want, only_got) in compare(src, tmp_path).items():
        assert (only_want, only_got) == ([], []), part


def test_names_lose_object_addresses_and_line_zero(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "python_function", "name": "train.py(12): step", "pid": 1,
         "tid": 1, "ts": 10, "dur": 100},
        {"ph": "X", "cat": "python_function", "name": "h.py(0): __next__", "pid": 1,
         "tid": 1, "ts": 20, "dur": 50},
        {"ph": "X", "cat": "python_function",
         "name": "<built-in method mean of Tensor object at 0x7f3a2c1b9e50>", "pid": 1,
         "tid": 1, "ts": 80, "dur": 5},
        {"ph": "X", "cat": "cpu_op", "name": "aten::mean", "pid": 1, "tid": 1, "ts": 81,
         "dur": 3},
        {"ph": "i", "s": "t", "name": "<function f at 0xdeadbeef>", "pid": 1, "tid": 1,
         "ts": 90},
    ]  # fmt: skip
    src = tmp_path / "names.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "names.perfetto-trace"
    run_cli("convert", src, "-o", out, check=True)
    with open_trace(out) as t:
        names = {r["name"] for r in t.query("select name from slice")}
    assert {
        "train.py(12): step",
        "h.py: __next__",
        "<built-in method mean of Tensor object>",
        "<function f>",
    } <= names
    assert not [n for n in names if "0x" in n or "(0)" in n]
    for part, (_, _, only_want, only_got) in compare(src, tmp_path).items():
        assert (only_want, only_got) == ([], []), part
