"""The analysis layer on traces whose every GPU idle gap is known (tests/analysis_traces.py),
on a converted Kineto trace and on a CUPTI stream kept from the H100: the gap classes to the
nanosecond, the top finding and the line it names, steps, the span, and the outputs built on
them (report --format json, --annotate, folded --mode idle, query's views)."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.analysis.analyze import analyze
from exporters.analysis.steps import step_table
from exporters.analysis.tables import Scope, StepsError
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from . import analysis_traces
from .conftest import run_cli

SCENARIOS = ["sync", "data", "host", "launch_bound", "gpu_bound"]
DATA = Path(__file__).resolve().parent.parent / "bench" / "data"


@pytest.fixture(scope="module")
def scenario_traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, object]]:
    out = tmp_path_factory.mktemp("analysis")
    traces = {}
    for name in SCENARIOS:
        path = out / f"{name}.pftrace"
        traces[name] = (path, analysis_traces.write(path, name))
    return traces


COLUMNS = {
    "sync": "sync_ns",
    "data_loading": "data_ns",
    "host_compute": "host_ns",
    "wait": "wait_ns",
    "launch": "launch_ns",
    "other": "other_ns",
}


def _class_sums(t: object, where: str = "1") -> dict[str, int]:
    row = t.query(  # type: ignore[attr-defined]
        "select "
        + ", ".join(f"sum({c}) as {k}" for k, c in COLUMNS.items())
        + f" from xpu_gpu_gap where {where}"
    )[0]
    return {k: int(v) for k, v in row.items() if v}


@pytest.mark.parametrize("name", SCENARIOS)
def test_gap_classes_are_exact(scenario_traces: dict, name: str) -> None:
    path, expected = scenario_traces[name]
    with open_trace(path) as t:
        analysis = analyze(t)
        # Every gap of the trace, to the nanosecond, and nothing else.
        assert _class_sums(t) == expected.gap_ns
        rows = t.query(
            "select dur, sync_ns + data_ns + host_ns + wait_ns + launch_ns + other_ns as s "
            "from xpu_gpu_gap"
        )
        assert all(r["dur"] == r["s"] for r in rows)
        # The findings look from step 2 on: the gaps that start there.
        focus = t.query("select ts, end_ts, kind from xpu_analysis_focus")[0]
        assert focus["kind"] == "steps" and focus["ts"] == analysis.steps.steps[1].ts
        in_focus = _class_sums(t, f"ts >= {focus['ts']}")
    assert {k: v for k, v in analysis.idle.by_class.items() if v} == in_focus
    assert analysis.span.focus_dur == analysis.span.end_ts - focus["ts"]
    # Gaps of set-up and step 1 are left out (with run-ahead launches, step 2 starts before
    # step 1's last kernel ends: then none is).
    for cls, ns in expected.gap_ns.items():
        assert 0 < in_focus.get(cls, 0) <= ns


@pytest.mark.parametrize("name", SCENARIOS)
def test_top_finding_names_the_cause_and_the_line(scenario_traces: dict, name: str) -> None:
    path, expected = scenario_traces[name]
    with open_trace(path) as t:
        analysis = analyze(t)
        focus_ts = t.scalar("select ts from xpu_analysis_focus")
        in_focus = _class_sums(t, f"ts >= {focus_ts}")
    if expected.finding is None:
        # A GPU-bound program gets no idle finding.
        assert analysis.findings == []
        return
    top = analysis.findings[0]
    assert top.code == expected.finding
    assert top.locations[0] == expected.location
    assert expected.location in top.title
    assert top.idle_ns == sum(in_focus.get(c, 0) for c in expected.claimed())
    # The evidence covers at least 90% of the time the finding claims.
    assert sum(s.ns for s in top.sites) >= 0.9 * top.idle_ns
    assert top.share == pytest.approx(top.idle_ns / analysis.span.focus_ns)
    assert top.suggestion and top.evidence


@pytest.mark.parametrize("name", SCENARIOS)
def test_steps_detected_from_the_launch_sequence(scenario_traces: dict, name: str) -> None:
    path, expected = scenario_traces[name]
    with open_trace(path) as t:
        analysis = analyze(t)
    steps = analysis.steps
    assert abs(len(steps.steps) - expected.steps) <= 1
    assert steps.source.startswith("detected")
    # Every step's busy time is inside its wall time; idle = wall - busy on one device.
    for s in steps.steps:
        assert 0 < s.busy_ns <= s.dur and s.idle_ns == s.dur - s.busy_ns
        assert s.compute_ns == s.busy_ns  # kernels only


@pytest.mark.parametrize("name", ["data", "launch_bound"])
def test_step_summary_beyond_its_rows_keeps_the_slowest(scenario_traces: dict, name: str) -> None:
    """Where a trace has more steps than the summary holds one by one (STEP_ROWS), the list
    keeps the slowest in step order and says so; the statistics still cover every step and
    equal those of the whole list (statistics.median, the nearest-rank p90)."""
    path, _expected = scenario_traces[name]
    with open_trace(path) as t:
        analysis = analyze(t)
        full = step_table(t)
        capped = step_table(t, rows=4)
    durs = sorted(s.dur for s in full.steps)
    n = len(durs)
    assert n > 4 and full.count == n and not full.capped and full.shown_note() == ""
    assert full.median_ns == int(statistics.median(durs))
    assert full.p90_ns == durs[min(n - 1, (n * 90 + 99) // 100 - 1)]
    assert (full.max_ns, full.spread) == (durs[-1], (durs[-1] - durs[0]) / full.median_ns)
    slowest = sorted(full.steps, key=lambda s: (-s.dur, s.step))[:4]
    assert capped.steps == sorted(slowest, key=lambda s: s.step)
    assert capped.count == n and capped.capped
    assert f"the 4 slowest of {n:,} steps" in capped.shown_note()
    same = ("source", "median_ns", "p90_ns", "max_ns", "spread", "slowest")
    assert [getattr(capped, k) for k in same] == [getattr(full, k) for k in same]
    doc = analysis.to_json()
    assert doc["steps_total"] == len(doc["steps"]) == n and "steps_note" not in doc


def test_marked_steps_win_over_detection(tmp_path: Path) -> None:
    from collector import model

    path = tmp_path / "marked.pftrace"
    events: list[model.Event] = [model.ProcessInfo(1, "p"), model.ThreadInfo(1, 1, "main")]
    for i in range(5):
        ts = 1_000_000 + i * 100_000
        events.append(model.CpuSlice(1, 1, ts, 90_000, f"ProfilerStep#{i}"))
        corr = i + 1
        flow = model.flow_id(1, corr)
        events.append(
            model.CpuSlice(
                1,
                1,
                ts + 1000,
                2000,
                "cudaLaunchKernel",
                model.CAT_CUDA_API,
                {"correlation_id": corr},
                flow_ids=(flow,),
            )
        )
        events.append(
            model.GpuOp(
                0,
                7,
                ts + 5000,
                50_000,
                "k",
                model.CAT_KERNEL,
                {"correlation_id": corr},
                correlation_id=corr,
                terminating_flow_ids=(flow,),
            )
        )
    with TraceWriter(path) as w:
        w.producer("p").write_all(batched(events))
    with open_trace(path) as t:
        analysis = analyze(t)
    assert [s.name for s in analysis.steps.steps] == [f"ProfilerStep#{i}" for i in range(5)]
    assert analysis.steps.source == "marked"
    assert [s.busy_ns for s in analysis.steps.steps] == [50_000] * 5
    # --steps naming nothing in the trace is an error, not a silent fallback.
    with open_trace(path) as t, pytest.raises(StepsError, match="nothing"):
        analyze(t, Scope(steps_glob="nothing*"))


def test_active_span_and_whole_trace(scenario_traces: dict) -> None:
    path, _ = scenario_traces["sync"]
    with open_trace(path) as t:
        active = analyze(t)
        first, last = t.query(
            "select min(ts) as a, max(ts + dur) as b from slice "
            "where category in ('kernel', 'memcpy', 'memset')"
        )[0].values()
    assert (active.span.ts, active.span.end_ts, active.span.kind) == (first, last, "active")
    with open_trace(path) as t:
        whole = analyze(t, Scope(span_all=True))
        bounds = t.query("select start_ts, end_ts from trace_bounds")[0]
    assert (whole.span.ts, whole.span.end_ts) == (bounds["start_ts"], bounds["end_ts"])
    assert whole.span.dur > active.span.dur


def test_report_json_and_annotated_copy(scenario_traces: dict, tmp_path: Path) -> None:
    path, expected = scenario_traces["data"]
    annotated = tmp_path / "annotated.pftrace"
    # Every step and gap of the active span (the default marks the findings' span: below).
    res = run_cli(
        "report", path, "--format", "json", "--annotate", annotated, "--span", "active",
        check=True,
    )  # fmt: skip
    doc = json.loads(res.stdout)
    assert [f["code"] for f in doc["findings"]][:1] == ["INPUT_PIPELINE"]
    f = doc["findings"][0]
    assert set(f) == {"code", "title", "idle_ns", "share", "locations", "evidence", "suggestion"}
    assert f["locations"][0] == expected.location
    assert len(doc["steps"]) == expected.steps and doc["span"]["kind"] == "active"
    with open_trace(annotated) as t:
        lanes = {
            (r["lane"], r["name"]): r["n"]
            for r in t.query(
                "select t.name as lane, s.name, count(*) as n from slice s "
                "join track t on s.track_id = t.id where s.category = 'xpu_perf_analysis' "
                "group by 1, 2"
            )
        }
        kernels = t.scalar("select count(*) from slice where category = 'kernel'")
    assert sum(n for (lane, _), n in lanes.items() if lane == "steps: python3") == expected.steps
    gaps = {name: n for (lane, name), n in lanes.items() if lane.startswith("GPU idle")}
    # Each gap in words with the line its cause ran at, as the finding names it.
    assert gaps == {f"data loading: {expected.location}": expected.steps - 1}
    assert kernels == 4 * expected.steps  # the copy keeps the trace
    # The input is never the annotated output.
    bad = run_cli("report", path, "--annotate", path)
    assert bad.returncode != 0 and "it is the input" in bad.stderr


def _marks(trace: Path) -> dict[str, list[tuple[int, int]]]:
    """The annotated copy's marks: lane -> [(ts, end)], in time order."""
    with open_trace(trace) as t:
        rows = t.query(
            "select t.name as lane, s.ts, s.ts + s.dur as end_ts from slice s "
            "join track t on s.track_id = t.id where s.category = 'xpu_perf_analysis' "
            "order by s.ts"
        )
    lanes: dict[str, list[tuple[int, int]]] = {}
    for r in rows:
        lanes.setdefault(r["lane"], []).append((int(r["ts"]), int(r["end_ts"])))
    return lanes


def test_annotate_marks_the_span_the_findings_cover(scenario_traces: dict, tmp_path: Path) -> None:
    """report --annotate marks what the findings cover by default (from the second step, as
    folded, flamegraph and view), says so, and takes --span like they do."""
    path, expected = scenario_traces["data"]
    runs = {}
    for span in ("steps", "active", "all"):
        out = tmp_path / f"annotated_{span}.pftrace"
        flags = () if span == "steps" else ("--span", span)
        res = run_cli("report", path, "--format", "json", "--annotate", out, *flags, check=True)
        runs[span] = (json.loads(res.stdout)["span"], _marks(out), res.stderr)
    focus, marks, said = runs["steps"]
    lo, hi = focus["focus_ts"], focus["focus_ts"] + focus["focus_dur_ns"]
    steps, gaps = marks["steps: python3"], marks["GPU idle: GPU 0 (NVIDIA H100)"]
    assert len(steps) == expected.steps - 1 and len(gaps) == expected.steps - 2
    assert all(lo <= ts < hi for ts, _ in steps + gaps)
    assert f"steps 2-{expected.steps}, the steady state the findings cover" in said, said
    assert "--span all" in said
    # The gaps marked are the ones the findings count (report's idle).
    counted = json.loads(run_cli("report", path, "--format", "json", check=True).stdout)["idle"]
    assert (len(gaps), sum(end - ts for ts, end in gaps)) == (counted["gaps"], counted["idle_ns"])
    # --span active: every step and gap of the run; all: the same here (no GPU idle outside).
    active = runs["active"][1]
    assert len(active["steps: python3"]) == expected.steps
    assert len(active["GPU idle: GPU 0 (NVIDIA H100)"]) == expected.steps - 1
    assert "the active span" in runs["active"][2] and "the whole trace" in runs["all"][2]


def test_folded_idle_adds_up_to_the_idle_time(scenario_traces: dict) -> None:
    path, expected = scenario_traces["sync"]
    # Every gap of the trace: the active span (the default covers the findings' steps).
    res = run_cli("folded", path, "--mode", "idle", "--span", "active", check=True)
    lines = [line.rsplit(" ", 1) for line in res.stdout.splitlines()]
    assert sum(int(w) for _, w in lines) == sum(expected.gap_ns.values())
    weights = {stack: int(w) for stack, w in lines}
    # Each part of each gap on its own stack: the time inside the sync on the sync's line,
    # the work after it on its samples' stack, the launch path on the launch's.
    in_sync = [
        w
        for s, w in weights.items()
        if s.endswith(
            "log_loss (train.py:31);cudaStreamSynchronize;[waiting in cudaStreamSynchronize]"
        )
    ]
    after = [w for s, w in weights.items() if s.endswith("augment (train.py:77);memmove")]
    assert in_sync == [expected.gap_ns["sync"]]
    assert after == [expected.gap_ns["host_compute"]]


def test_query_builds_the_analysis_views(scenario_traces: dict) -> None:
    path, expected = scenario_traces["host"]
    res = run_cli(
        "query",
        path,
        "select class, count(*) as n from xpu_gpu_gap group by class",
        "--format",
        "json",
        check=True,
    )
    assert json.loads(res.stdout) == [{"class": "host_compute", "n": expected.steps - 1}]


def test_converted_kineto_trace(example_trace: Path) -> None:
    """No samples and no launch stacks: the CPU slices stand in, and the copies' host memory
    comes from Kineto's op names."""
    with open_trace(example_trace) as t:
        analysis = analyze(t)
        pageable = t.scalar("select count(*) from xpu_copy where host_memory = 'pageable'")
        named = t.scalar("select count(*) from slice where name glob '*Pageable*'")
    assert pageable == named > 0
    assert analysis.idle.idle_ns == sum(analysis.idle.by_class.values())
    codes = [f.code for f in analysis.findings]
    assert "PAGEABLE_COPY" in codes
    assert all(f.locations for f in analysis.findings)


def test_recorded_copies_carry_their_host_memory(tmp_path: Path) -> None:
    from collector.sources.cupti import CuptiSource

    streams = tmp_path / "streams"
    streams.mkdir()
    # A copy: the reader takes only regular files of the directory's owner (no links).
    shutil.copyfile(DATA / "cupti_streams/launch_bound.xpstream", streams / "cupti-1.xpstream")
    out = tmp_path / "lb.pftrace"
    with TraceWriter(
        out,
        clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
        clock_snapshot={pb.BUILTIN_CLOCK_BOOTTIME: 0, pb.BUILTIN_CLOCK_MONOTONIC: 0},
    ) as w:
        w.producer("cupti").write_all(CuptiSource(streams).events())
    with open_trace(out) as t:
        rows = t.query(
            "select extract_arg(arg_set_id, 'debug.copy_kind') as d, "
            "extract_arg(arg_set_id, 'debug.host_memory') as h, count(*) as n "
            "from slice where category = 'memcpy' group by 1, 2"
        )
    kinds = {(r["d"], r["h"]) for r in rows}
    # Host-side copies name their host memory; device-to-device copies have none.
    assert all(h in ("pageable", "pinned") for d, h in kinds if d in ("HtoD", "DtoH"))
    assert any(h is not None for _, h in kinds)
