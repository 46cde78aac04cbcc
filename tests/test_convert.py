"""`convert` on real torch.profiler traces recorded on an H100 (bench/data/)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import EXAMPLE, REPO, load_kineto, run_cli

GPU_CATS = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync"}
TRACES = [
    EXAMPLE,
    REPO / "bench/data/kineto_cuda_graph.json.gz",
    REPO / "bench/data/kineto_multi_stream.json.gz",
    REPO / "bench/data/kineto_launch_bound_stack.json.gz",
]


@pytest.mark.parametrize("src", TRACES, ids=lambda p: p.name)
def test_convert_keeps_every_gpu_op_and_links_it(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.perfetto-trace"
    proc = run_cli("convert", src, "-o", out)
    assert proc.returncode == 0, proc.stderr
    events = load_kineto(src)["traceEvents"]
    xs = [e for e in events if e.get("ph") == "X"]
    api_corr = {
        e["args"]["correlation"] for e in xs if e.get("cat") in ("cuda_runtime", "cuda_driver")
    }
    with open_trace(out) as t:
        for cat, ours in GPU_CATS.items():
            ops = [e for e in xs if e.get("cat") == cat]
            rows = t.query(f"select count(*) n, sum(dur) d from slice where category = '{ours}'")
            assert rows[0]["n"] == len(ops), cat
            if ops:
                expected = sum(round(e["dur"] * 1000) for e in ops)
                assert abs((rows[0]["d"] or 0) - expected) <= len(ops), cat
        # Every X event becomes a slice (overlaps go to lanes, nothing is dropped).
        assert t.scalar(
            "select count(*) from slice where category is not 'xpu_perf_metadata'"
        ) == len([e for e in xs if "ts" in e]) + len(
            [e for e in events if e.get("ph") in ("i", "I")]
        )
        # One flow into every GPU op whose runtime/driver call is in the trace.
        gpu_with_api = sum(
            1 for e in xs if e.get("cat") in GPU_CATS and e["args"].get("correlation") in api_corr
        )
        flows_in = t.query(
            "select g.id, count(f.id) n from slice g left join flow f on f.slice_in = g.id "
            "where g.category in ('kernel','memcpy','memset','sync') group by g.id"
        )
        assert sum(1 for r in flows_in if r["n"] == 1) == gpu_with_api
        assert all(r["n"] <= 1 for r in flows_in)
        # Flows start at the cuda_api slice with the same correlation id.
        bad = t.scalar(
            "select count(*) from flow f join slice a on a.id = f.slice_out "
            "join slice g on g.id = f.slice_in "
            "join args aa on aa.arg_set_id = a.arg_set_id and aa.key = 'debug.correlation_id' "
            "join args ga on ga.arg_set_id = g.arg_set_id and ga.key = 'debug.correlation_id' "
            "where aa.int_value != ga.int_value or a.category != 'cuda_api'"
        )
        assert bad == 0
        errors = t.query(
            "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
        )
        assert errors == []


def test_graph_launch_fans_out_to_every_node(tmp_path: Path) -> None:
    src = REPO / "bench/data/kineto_cuda_graph.json.gz"
    out = tmp_path / "g.perfetto-trace"
    run_cli("convert", src, "-o", out, check=True)
    events = load_kineto(src)["traceEvents"]
    launches = [e for e in events if e.get("name") == "cudaGraphLaunch" and e.get("ph") == "X"]
    per_corr = Counter(
        e["args"]["correlation"] for e in events if e.get("ph") == "X" and e.get("cat") in GPU_CATS
    )
    with open_trace(out) as t:
        rows = t.query(
            "select a.id, count(f.id) n from slice a join flow f on f.slice_out = a.id "
            "where a.name = 'cudaGraphLaunch' group by a.id"
        )
    assert len(rows) == len(launches)
    expected = sorted(per_corr[e["args"]["correlation"]] for e in launches)
    assert sorted(r["n"] for r in rows) == expected
    assert max(expected) > 1


def test_overlapping_events_go_to_lanes(tmp_path: Path) -> None:
    src = tmp_path / "overlap.json"
    src.write_text(
        '{"traceEvents": ['
        '{"ph":"X","cat":"cpu_op","name":"a","pid":1,"tid":1,"ts":10,"dur":10},'
        '{"ph":"X","cat":"cpu_op","name":"b","pid":1,"tid":1,"ts":15,"dur":10},'
        '{"ph":"X","cat":"kernel","name":"k1","pid":0,"tid":7,"ts":30,"dur":5,'
        '"args":{"device":0,"stream":7}},'
        '{"ph":"X","cat":"kernel","name":"k2","pid":0,"tid":7,"ts":32,"dur":5,'
        '"args":{"device":0,"stream":7}}]}'
    )
    out = tmp_path / "o.perfetto-trace"
    run_cli("convert", src, "-o", out, check=True)
    with open_trace(out) as t:
        rows = t.query(
            "select s.name, s.ts, s.dur, t.name track "
            "from slice s join track t on s.track_id = t.id "
            "where s.category != 'xpu_perf_metadata' order by s.name"
        )
        assert [(r["name"], r["ts"], r["dur"]) for r in rows] == [
            ("a", 10000, 10000),
            ("b", 15000, 10000),
            ("k1", 30000, 5000),
            ("k2", 32000, 5000),
        ]
        assert rows[2]["track"] == rows[3]["track"] == "Stream 7"
        assert t.scalar("select count(distinct track_id) from slice where name in ('k1','k2')") == 2
        assert t.scalar("select count(distinct track_id) from slice where name in ('a','b')") == 2


@pytest.mark.parametrize(
    "make_bad, message",
    [
        (lambda p: p.write_bytes(EXAMPLE.read_bytes()[:20000]), "truncated or corrupt gzip"),
        (lambda p: p.write_text("hello, not json"), "not valid JSON"),
        (lambda p: p.write_text('{"foo": 1}'), "no 'traceEvents'"),
        (lambda p: p.write_text('{"traceEvents": [{"ph": "X", "ts": 1'), "not valid JSON"),
    ],
    ids=["truncated-gz", "not-json", "not-a-trace", "truncated-json"],
)
def test_bad_input_fails_cleanly(tmp_path: Path, make_bad, message: str) -> None:
    src = tmp_path / "bad.json.gz"
    make_bad(src)
    out = tmp_path / "bad.perfetto-trace"
    proc = run_cli("convert", src, "-o", out)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert message in proc.stderr
    assert list(tmp_path.iterdir()) == [src]  # no output, no .tmp left behind


def test_summary_reports_counts(tmp_path: Path) -> None:
    proc = run_cli("convert", EXAMPLE, "-o", tmp_path / "x.perfetto-trace", check=True)
    assert "311 kernels" in proc.stderr
    assert "events in 3876" in proc.stderr
    assert "skipped 5: GPU process/stream labels" in proc.stderr


def test_grid_that_is_not_three_numbers_is_kept_as_text(tmp_path: Path) -> None:
    """A kernel whose grid holds nulls (seen by the fuzz test) converts: the grid stays as
    its JSON text instead of x/y/z, and the kernel is not lost."""
    src = tmp_path / "grid.json"
    kernel = {
        "ph": "X",
        "cat": "kernel",
        "name": "k",
        "pid": 0,
        "tid": 7,
        "ts": 10,
        "dur": 2,
        "args": {
            "device": 0,
            "stream": 7,
            "correlation": 1,
            "grid": [None, None, None],
            "block": [128, 1, 1],
        },
    }
    src.write_text(json.dumps({"traceEvents": [kernel]}))
    out = tmp_path / "grid.perfetto-trace"
    res = run_cli("convert", src, "-o", out)
    assert res.returncode == 0, res.stderr
    with open_trace(out) as t:
        row = t.query(
            "select extract_arg(arg_set_id, 'debug.grid') as grid, "
            "extract_arg(arg_set_id, 'debug.block_x') as bx from slice where name = 'k'"
        )[0]
    assert row == {"grid": "[null,null,null]", "bx": 128}


def test_compression_level_trades_size_and_keeps_every_event(tmp_path: Path) -> None:
    """--compression-level: the default (6) and 10 read back the same slices; 10 is the
    smaller file, 0 writes none deflated; a level out of range is one line, no output."""
    src = REPO / "bench/data/kineto_launch_bound.json.gz"
    sizes, readings = {}, {}
    for level in (None, "10", "0"):
        out = tmp_path / f"level{level}.perfetto-trace"
        extra = ["--compression-level", level] if level else []
        run_cli("convert", src, "-o", out, *extra, check=True)
        sizes[level] = out.stat().st_size
        with open_trace(out) as t:
            readings[level] = t.query_columns(
                "select ts, dur, name, category, depth from slice order by ts, dur, name, depth"
            )[1]
    assert readings[None] == readings["10"] == readings["0"]
    assert len(readings[None]) > 10_000
    assert sizes["10"] < sizes[None] < sizes["0"]
    for bad in ("13", "-1", "fast"):
        out = tmp_path / f"bad{bad}.perfetto-trace"
        proc = run_cli("convert", src, "-o", out, "--compression-level", bad)
        assert proc.returncode == 2
        assert "is not a deflate level: pass 0 (none) to 12" in proc.stderr
        assert "Traceback" not in proc.stderr
        assert not out.exists()
