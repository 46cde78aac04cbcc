"""`convert` on real Kineto traces of other accelerators and Kineto versions
(tests/data/kineto_outside/, see its README): exact device ops, one flow per flow pair."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

from .conftest import REPO, load_kineto, run_cli

DATA = REPO / "tests" / "data" / "kineto_outside"
TRACES = sorted(DATA.glob("*.json.gz"))
DEVICE_CATS = {
    "kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "mtia_ccp_events", "Kernel", "Memcpy",
    "Memset",
}  # fmt: skip
API_CATS = {"cuda_runtime", "cuda_driver", "mtia_runtime", "xpu_runtime", "Runtime"}
OURS = ("kernel", "memcpy", "memset", "sync")


def ns(us: float) -> int:
    """Kineto us -> ns, exact for the text of the number (floats lose ns at 1.7e15 us)."""
    return us * 1000 if isinstance(us, int) else round(Decimal(repr(us)) * 1000)


def flow_pairs(events: list[dict[str, Any]]) -> Counter[tuple[str, int, int]]:
    """(category, start ts, end ts) of every s -> f pair of the input."""
    starts: dict[tuple[str, Any], dict[str, Any]] = {}
    ends: dict[tuple[str, Any], list[dict[str, Any]]] = {}
    for e in events:
        if e.get("ph") == "s":
            starts.setdefault((e["cat"], e["id"]), e)
        elif e.get("ph") == "f":
            ends.setdefault((e["cat"], e["id"]), []).append(e)
    return Counter(
        (key[0], ns(s["ts"]), ns(f["ts"])) for key, s in starts.items() for f in ends.get(key, [])
    )


def correlation_only_flows(events: list[dict[str, Any]]) -> int:
    """Device ops linked to their API call by correlation id alone (no ac2g pair)."""
    xs = [e for e in events if e.get("ph") == "X"]
    paired = {k[1] for k in _pair_keys(events) if k[0] in ("ac2g", "async_gpu")}
    api = {e.get("args", {}).get("correlation") for e in xs if e.get("cat") in API_CATS}
    api.discard(None)
    return sum(
        1
        for e in xs
        if e.get("cat") in DEVICE_CATS
        and (corr := e.get("args", {}).get("correlation")) in api
        and corr not in paired
    )


@pytest.fixture(scope="module", params=TRACES, ids=lambda p: p.name.split(".")[0])
def converted(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    src: Path = request.param
    out = tmp_path_factory.mktemp("outside") / "out.perfetto-trace"
    proc = run_cli("convert", src, "-o", out)
    assert proc.returncode == 0, proc.stderr
    return src, out, proc.stderr


def test_device_ops_exact(converted: tuple[Path, Path, str]) -> None:
    src, out, _ = converted
    xs = [e for e in load_kineto(src)["traceEvents"] if e.get("ph") == "X"]
    device = [e for e in xs if e.get("cat") in DEVICE_CATS]
    assert device or "profiler_range" in src.name
    kernels = [e for e in xs if e.get("cat") in ("kernel", "Kernel")]
    with open_trace(out) as t:
        quoted = ",".join(f"'{c}'" for c in OURS)
        n, total = t.query(
            f"select count(*) n, sum(dur) d from slice where category in ({quoted})"
        )[0].values()
        assert n == len(device)
        assert (total or 0) == sum(ns(e["dur"]) for e in device)
        if kernels:
            assert t.scalar("select sum(dur) from slice where category = 'kernel'") >= sum(
                ns(e["dur"]) for e in kernels
            )
        # Every device op sits on a stream track under its device's track.
        assert t.scalar(
            f"select count(*) from slice s join track t on s.track_id = t.id "
            f"join track p on p.id = t.parent_id where s.category in ({quoted}) "
            "and (t.name like 'Stream %' or t.name = 'no stream') and p.name like 'GPU %'"
        ) == len(device)
        errors = t.query(
            "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
        )
        assert errors == []


def test_every_flow_pair_is_a_flow(converted: tuple[Path, Path, str]) -> None:
    src, out, _ = converted
    events = load_kineto(src)["traceEvents"]
    pairs = flow_pairs(events)
    with open_trace(out) as t:
        rows = t.query(
            "select a.ts t_out, b.ts t_in from flow f join slice a on a.id = f.slice_out "
            "join slice b on b.id = f.slice_in"
        )
    got = Counter((r["t_out"], r["t_in"]) for r in rows)
    expected = Counter({(s, f): n for (_, s, f), n in pairs.items()})
    # Flows by correlation id come on top of the pairs (none where the input has pairs).
    assert sum(got.values()) == sum(expected.values()) + correlation_only_flows(events)
    assert not expected - got


def test_no_stream_ops_have_their_own_track(tmp_path: Path) -> None:
    src = DATA / "cuda_alexnet_context_sync.json.gz"
    out = tmp_path / "a.perfetto-trace"
    run_cli("convert", src, "-o", out, check=True)
    xs = [e for e in load_kineto(src)["traceEvents"] if e.get("ph") == "X"]
    no_stream = [e for e in xs if e.get("args", {}).get("stream") == 4294967295]
    assert no_stream
    with open_trace(out) as t:
        rows = t.query(
            "select s.name, s.ts from slice s join track t on s.track_id = t.id "
            "where t.name = 'no stream'"
        )
    assert sorted((r["name"], r["ts"]) for r in rows) == sorted(
        (e["name"], ns(e["ts"])) for e in no_stream
    )


def test_what_is_not_converted_is_named(converted: tuple[Path, Path, str]) -> None:
    src, out, stderr = converted
    lines = [line.strip() for line in stderr.splitlines() if line.strip().startswith("skipped")]
    with open_trace(out) as t:
        load_views(t)
        meta = {r["key"]: r["int_value"] for r in t.query("select * from xpu_metadata")}
    skipped = {k: v for k, v in meta.items() if k.startswith("convert_skipped_")}
    assert sum(skipped.values()) == meta["convert_skipped"]
    assert len(skipped) == len(lines)
    assert sum(int(line.split()[1].rstrip(":")) for line in lines) == meta["convert_skipped"]
    # Every flow event is either part of a pair (its s once, each f) or named by reason.
    events = load_kineto(src)["traceEvents"]
    flow_events = sum(1 for e in events if e.get("ph") in ("s", "f"))
    in_pairs = len(_pair_keys(events)) + sum(flow_pairs(events).values())
    unpaired = sum(v for k, v in skipped.items() if "_flow_" in k)
    assert in_pairs + unpaired == flow_events


def _pair_keys(events: list[dict[str, Any]]) -> set[tuple[str, Any]]:
    s = {(e["cat"], e["id"]) for e in events if e.get("ph") == "s"}
    f = {(e["cat"], e["id"]) for e in events if e.get("ph") == "f"}
    return s & f


@pytest.mark.parametrize(
    "api_cat",
    ["xpu_runtime", "privateuse1_runtime", "privateuse1_driver", "mtia_runtime", "cuda_runtime"],
)
def test_any_accelerator_api_links_to_its_device_ops(tmp_path: Path, api_cat: str) -> None:
    """Synthetic traces in the shape of a real one (Kineto writes the same event layout
    for every backend): an API call, its kernel and copy, an ac2g pair to the kernel, the
    copy linked by correlation id only."""
    events = [
        {"ph": "X", "cat": api_cat, "name": "launch", "pid": 10, "tid": 11, "ts": 100.0,
         "dur": 5.0, "args": {"correlation": 7}},
        {"ph": "X", "cat": api_cat, "name": "copy", "pid": 10, "tid": 11, "ts": 110.0,
         "dur": 5.0, "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 3, "tid": 5, "ts": 120.0, "dur": 4.0,
         "args": {"device": 3, "stream": 5, "correlation": 7}},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 3, "tid": 5,
         "ts": 130.0, "dur": 2.0, "args": {"device": 3, "stream": 5, "correlation": 8}},
        {"ph": "s", "cat": "ac2g", "id": 7, "pid": 10, "tid": 11, "ts": 100.0, "name": "ac2g"},
        {"ph": "f", "cat": "ac2g", "id": 7, "pid": 3, "tid": 5, "ts": 120.0, "bp": "e",
         "name": "ac2g"},
    ]  # fmt: skip
    src = tmp_path / "t.json"
    src.write_text(json.dumps({"traceEvents": events}))
    out = tmp_path / "t.perfetto-trace"
    run_cli("convert", src, "-o", out, check=True)
    with open_trace(out) as t:
        rows = t.query(
            "select a.name api, a.category acat, b.name op, b.category bcat from flow f "
            "join slice a on a.id = f.slice_out join slice b on b.id = f.slice_in order by 1"
        )
        assert t.scalar("select count(*) from stats where severity = 'error' and value > 0") == 0
    assert [tuple(r.values()) for r in rows] == [
        ("copy", "cuda_api", "Memcpy HtoD", "memcpy"),
        ("launch", "cuda_api", "k", "kernel"),
    ]
