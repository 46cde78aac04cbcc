"""`xpu-perf report`: every number checked against the raw trace (recomputed in Python from
plain slice/args rows), the terminal output, and the HTML page in headless Chromium (no
console errors, nothing requested off the machine, flamegraph GPU total = kernel time)."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from collector.frame_names import kernel_labels, short_name
from exporters.analysis.tables import DEFAULT_SCOPE, Scope
from exporters.perfetto.engine.trace_processor import Trace, open_trace
from exporters.report.html_page import FLAME_ID
from exporters.report.queries import Report, Section, collect

from .browser import Chromium, is_local
from .conftest import run_cli
from .report_inputs import RecordedTrace, record_fake_gpu_app

ALL = 10_000  # a --top that keeps every row


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedTrace:
    return record_fake_gpu_app(tmp_path_factory.mktemp("report_rec"))


@pytest.fixture(params=["kineto", "recorded"])
def trace_path(request: pytest.FixtureRequest) -> Path:
    if request.param == "kineto":
        return request.getfixturevalue("example_trace")
    return request.getfixturevalue("recorded").path


def full_report(path: Path, scope: Scope = DEFAULT_SCOPE) -> tuple[Report, dict[str, Any]]:
    """The report with every row, and the raw rows the checks recompute it from."""
    with open_trace(path) as t:
        report = collect(t, path.name, top=ALL, bins=50, stacks=True, scope=scope)
        raw = _raw(t)
    return report, raw


def _raw(t: Trace) -> dict[str, Any]:
    return {
        "gpu_ops": t.query(
            "select s.id, s.ts, s.dur, s.name, s.category, d.name as device, tr.name as stream, "
            "extract_arg(s.arg_set_id, 'debug.bytes') as bytes, "
            "extract_arg(s.arg_set_id, 'debug.copy_kind') as copy_kind "
            "from slice s join track tr on s.track_id = tr.id "
            "join track d on d.id = tr.parent_id "
            "where s.category in ('kernel', 'memcpy', 'memset')"
        ),
        "api": t.query("select id, name, dur from slice where category = 'cuda_api'"),
        "flow_targets": {r["slice_in"] for r in t.query("select slice_in from flow")},
        # The report's span: the active span, first GPU op to the end of the last.
        "window": t.query(
            "select min(ts) as start_ts, max(ts + dur) - min(ts) as dur from slice "
            "where category in ('kernel', 'memcpy', 'memset') and dur > 0"
        )[0],
        "metadata": t.query(
            "select substr(a.key, 7) as key, coalesce(a.int_value, a.real_value) as value "
            "from slice s join args a using (arg_set_id) "
            "where s.category = 'xpu_perf_metadata' and a.value_type in ('int', 'uint', 'real')"
        ),
        "cpu_samples": t.query("select count(*) as n from xpu_cpu_sample")[0]["n"],
    }


def section(report: Report, key: str) -> Section:
    return next(s for s in report.sections if s.key == key)


def nearest_rank(sorted_values: list[int], p: float) -> int:
    return sorted_values[math.ceil(p / 100 * len(sorted_values)) - 1]


def union_length(intervals: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def test_kernel_table_matches_the_raw_durations(trace_path: Path) -> None:
    report, raw = full_report(trace_path)
    durations: dict[str, list[int]] = defaultdict(list)
    for op in raw["gpu_ops"]:
        if op["category"] == "kernel":
            durations[op["name"]].append(op["dur"])
    rows = section(report, "kernels").rows
    assert len(rows) == len(durations) > 0
    kernel_total = sum(sum(d) for d in durations.values())
    labels = kernel_labels([r.get("name_full", r["name"]) for r in rows])
    for row in rows:
        # The cell shows the short name with the template arguments that tell kernels
        # apart; the full one (what the trace holds) is kept for the HTML tooltip.
        full = row.get("name_full", row["name"])
        assert row["name"] == labels[full]
        assert row["name"].startswith(short_name(full).replace("(anonymous namespace)::", ""))
        d = sorted(durations[full])
        assert row["count"] == len(d)
        assert row["total_ns"] == sum(d)
        assert row["mean_ns"] == pytest.approx(sum(d) / len(d))
        assert row["p50_ns"] == nearest_rank(d, 50)
        assert row["p99_ns"] == nearest_rank(d, 99)
        assert row["max_ns"] == d[-1]
        assert row["pct"] == pytest.approx(100 * sum(d) / kernel_total)
    totals = [r["total_ns"] for r in rows]
    assert totals == sorted(totals, reverse=True)


def test_busy_idle_and_timeline_match_interval_unions(trace_path: Path) -> None:
    report, raw = full_report(trace_path)
    window = raw["window"]["dur"]
    per_key: dict[tuple[str, str], list[tuple[int, int]]] = defaultdict(list)
    for op in raw["gpu_ops"]:
        if op["dur"] > 0:
            span = (op["ts"], op["ts"] + op["dur"])
            per_key[(op["device"], op["stream"])].append(span)
            per_key[(op["device"], "*")].append(span)
    rows = section(report, "gpu_streams").rows
    assert {(r["device"], r["stream"]) for r in rows} == set(per_key)
    for row in rows:
        busy = union_length(per_key[(row["device"], row["stream"])])
        assert row["busy_ns"] == busy
        assert row["idle_ns"] == window - busy
        assert row["busy_pct"] == pytest.approx(100 * busy / window)
    device = next(r for r in rows if r["stream"] == "*")
    assert 0 < device["busy_ns"] <= sum(op["dur"] for op in raw["gpu_ops"])
    # The timeline's bins add up to the same busy time, row by row, and no bin is over full.
    timeline = report.timeline
    assert timeline.dur_ns == window and timeline.bins == 50
    assert {(r.device, r.stream) for r in timeline.rows} == set(per_key)
    for tl_row in timeline.rows:
        assert sum(tl_row.busy_ns) == union_length(per_key[(tl_row.device, tl_row.stream)])
        assert all(0 <= b <= timeline.bin_ns for b in tl_row.busy_ns)
    # One bin recomputed by clipping: the busiest bin of the device row.
    dev_row = next(r for r in timeline.rows if r.stream == "*")
    i = max(range(timeline.bins), key=lambda k: dev_row.busy_ns[k])
    lo = timeline.t0 + i * timeline.bin_ns
    hi = lo + timeline.bin_ns
    clipped = [
        (max(a, lo), min(b, hi)) for a, b in per_key[(dev_row.device, "*")] if a < hi and b > lo
    ]
    assert dev_row.busy_ns[i] == union_length(clipped) > 0


def test_memcpy_api_launch_and_counter_tables(trace_path: Path) -> None:
    report, raw = full_report(trace_path)
    copies: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for op in raw["gpu_ops"]:
        if op["category"] == "memcpy":
            direction = op["copy_kind"] or op["name"].removeprefix("Memcpy ")
            copies[direction].append(op)
    memcpy = {r["direction"]: r for r in section(report, "memcpy").rows}
    assert set(memcpy) == set(copies) and memcpy
    for direction, ops in copies.items():
        row = memcpy[direction]
        assert row["count"] == len(ops)
        assert row["bytes"] == sum(op["bytes"] for op in ops)
        assert row["total_ns"] == sum(op["dur"] for op in ops)
        assert row["gb_per_s"] == pytest.approx(row["bytes"] / row["total_ns"])

    api_total: dict[str, int] = defaultdict(int)
    for call in raw["api"]:
        api_total[call["name"]] += call["dur"]
    api_rows = section(report, "cuda_api").rows
    assert {r["name"]: r["total_ns"] for r in api_rows} == api_total

    # Launch contexts: every GPU op with an API call is under exactly one context row.
    linked = sum(op["dur"] for op in raw["gpu_ops"] if op["id"] in raw["flow_targets"])
    assert sum(r["gpu_ns"] for r in section(report, "launch_stacks").rows) == linked > 0

    counters = {
        r["counter"]: r["value"]
        for r in section(report, "counters").rows
        if r["source"] == "xpu-perf"
    }
    assert counters == {m["key"]: m["value"] for m in raw["metadata"]}
    assert not [r for r in section(report, "counters").rows if r["source"] != "xpu-perf"]


def test_cpu_stacks_of_a_recorded_trace(recorded: RecordedTrace) -> None:
    if not recorded.cpu_samples:
        pytest.skip("no eBPF here (needs root + bcc): the recorded trace has no CPU samples")
    report, raw = full_report(recorded.path)
    rows = section(report, "cpu_stacks").rows
    assert sum(r["samples"] for r in rows) == raw["cpu_samples"] > 100
    # two_callers: heavy_caller burns 3x what light_caller does; its stack comes first.
    assert rows[0]["stack"].endswith(";heavy_caller;burn")
    assert "launch stack recorded" in section(report, "launch_stacks").note


def test_top_functions_of_a_recorded_trace(recorded: RecordedTrace) -> None:
    """two_callers: burn() does all the work, called from heavy_caller 3x as often as from
    light_caller: burn is one row (not one per caller) with nearly all the self time, and
    heavy_caller's total is about 3x light_caller's."""
    if not recorded.cpu_samples:
        pytest.skip("no eBPF here (needs root + bcc): the recorded trace has no CPU samples")
    # burn() runs outside the fake app's GPU work: the whole trace (--span all).
    report, raw = full_report(recorded.path, Scope(span_all=True))
    rows = {r["function"]: r for r in section(report, "top_functions").rows}
    assert rows and next(iter(rows)) == "burn"
    assert sum(r["self_samples"] for r in rows.values()) <= raw["cpu_samples"]
    burn, heavy, light = rows["burn"], rows["heavy_caller"], rows["light_caller"]
    assert burn["self_pct"] > 50
    assert burn["total_pct"] >= heavy["total_pct"] + light["total_pct"] - 1e-9
    assert 2.0 < heavy["total_pct"] / light["total_pct"] < 4.5


def test_top_functions_cover_the_steady_state(recorded: RecordedTrace) -> None:
    """By default the rankings count the samples of the analysis's focus (here the fake
    app's GPU work; burn() before it is set-up to this report) and say how many others
    there are; --span all ranks them all."""
    if not recorded.cpu_samples:
        pytest.skip("no eBPF here (needs root + bcc): the recorded trace has no CPU samples")
    report, _ = full_report(recorded.path)
    with open_trace(recorded.path) as t:
        collect(t, recorded.path.name, top=1)
        inside = t.scalar(
            "select count(*) from xpu_cpu_sample s, xpu_analysis_focus f "
            "where s.ts between f.ts and f.end_ts"
        )
        everything = t.scalar("select count(*) from xpu_cpu_sample")
    assert 0 < inside < everything
    ranked = section(report, "top_functions")
    assert 0 < sum(r["self_samples"] for r in ranked.rows) <= inside
    assert "burn" not in {r["function"] for r in ranked.rows}
    assert f"{inside:,} of {everything:,} CPU samples" in ranked.note
    by_total = section(report, "top_functions_total")
    assert {r["function"] for r in by_total.rows} == {r["function"] for r in ranked.rows}
    totals = [r["total_pct"] for r in by_total.rows]
    assert totals == sorted(totals, reverse=True)
    whole, _ = full_report(recorded.path, Scope(span_all=True))
    assert section(whole, "top_functions").note.startswith("over all CPU samples")


def test_report_terminal_output(example_trace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every table (the one-screen default: tests/test_report_terminal.py), 100 columns wide.
    monkeypatch.setenv("COLUMNS", "100")
    proc = run_cli("report", example_trace, "--top", "5", "--all")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    for title in (
        "Top GPU kernels by total time",
        "GPU busy vs idle",
        "GPU busy over time",
        "Memory copies by direction",
        "CUDA API calls by CPU time",
        "Top functions by self time (CPU samples): no CPU samples in this trace",
        "Top functions by total time (CPU samples): no CPU samples in this trace",
        "Where GPU time is launched from",
        "Counters: drops, matches, totals",
    ):
        assert title in out, title
    with open_trace(example_trace) as t:
        top = t.scalar(
            "select name from slice where category = 'kernel' "
            "group by name order by sum(dur) desc limit 1"
        )
    assert short_name(top)[:20] in out  # kernel names read short, like C++ frames
    assert "convert_gpu_ops_without_api" in out
    assert "HtoD (Pageable -> Device)" in out


def test_report_errors_are_one_line(example_trace: Path, tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("not a trace\n")
    cases = (
        (("report", tmp_path / "missing.perfetto-trace"), "no such trace file"),
        (("report", notes), "cannot read"),
        (("report", example_trace, "--top", "0"), "--top"),
        (("report", example_trace, "-o", tmp_path / "no" / "dir.html"), "cannot write"),
    )
    for args, message in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
        # A failed run shows no report either (the -o case used to print it, then fail).
        assert proc.stdout == "", args


# The flamegraph's frames as the browser sees them, and a zoom by click.
_FLAME_JS = f"""(async () => {{
  const svg = document.getElementById('{FLAME_ID}');
  const frames = [...svg.querySelectorAll('.fg-f')].map(g => ({{
    name: g.querySelector('title').textContent.split('\\n')[0],
    v: +g.getAttribute('data-v'), d: +g.getAttribute('data-d'), g: g }}));
  // Kernels drawn, plus those under a pixel kept as the graph's sliver data (deflated
  // JSON in base64, by column).
  const packed = atob(svg.querySelector('.fg-data').textContent.trim());
  const bytes = Uint8Array.from(packed, c => c.charCodeAt(0));
  const data = JSON.parse(await new Response(
    new Blob([bytes]).stream().pipeThrough(new DecompressionStream('deflate'))).text());
  const kernels = frames.filter(f => f.name.startsWith('[GPU_Kernel]'))
                        .reduce((s, f) => s + f.v, 0)
    + data.value.filter((v, i) => data.names[data.name[i]][0].startsWith('[GPU_Kernel]'))
                .reduce((s, v) => s + v, 0);
  const rootWidth = +frames[0].g.querySelector('rect').getAttribute('width');
  const target = frames.filter(f => f.d === 2).sort((a, b) => a.v - b.v)[0].g;
  const before = +target.querySelector('rect').getAttribute('width');
  target.dispatchEvent(new MouseEvent('click', {{bubbles: true}}));  // as a real click
  // The zoom follows once the slivers are inflated.
  for (let i = 0; i < 100 && +target.querySelector('rect').getAttribute('width') === before; i++)
    await new Promise(r => setTimeout(r, 50));
  const zoomed = +target.querySelector('rect').getAttribute('width');
  return {{kernels, rootWidth, zoomed, count: frames.length}};
}})()"""


def test_html_report_in_chromium(trace_path: Path, tmp_path: Path) -> None:
    html = tmp_path / f"report_{trace_path.stem}.html"
    proc = run_cli("report", trace_path, "-o", html)
    assert proc.returncode == 0, proc.stderr
    # The flamegraph covers what the findings cover (the steady state where steps are found).
    span = json.loads(run_cli("report", trace_path, "--format", "json").stdout)["span"]
    lo, hi = span["focus_ts"], span["focus_ts"] + span["focus_dur_ns"] + 1
    with open_trace(trace_path) as t:
        kernel_ns = t.scalar(
            f"select sum(dur) from slice where category = 'kernel' and ts >= {lo} and ts < {hi}"
        )
        streams = t.scalar(
            "select count(*) from (select distinct tr.parent_id, tr.name from slice s "
            "join track tr on s.track_id = tr.id where s.category in ('kernel','memcpy','memset'))"
        )
        devices = t.scalar(
            "select count(distinct tr.parent_id) from slice s join track tr "
            "on s.track_id = tr.id where s.category in ('kernel','memcpy','memset')"
        )
    with Chromium(width=1300, height=1000) as browser:
        browser.navigate(html.as_uri())
        browser.wait_for("document.readyState === 'complete'", what="the report to load")
        assert browser.evaluate("document.querySelectorAll('.tl-row').length") == (
            streams + devices
        )
        assert browser.evaluate("document.querySelectorAll('#table-kernels tbody tr').length")
        browser.evaluate(
            f"document.getElementById('{FLAME_ID}').scrollIntoView({{block: 'center'}})"
        )
        browser.screenshot(tmp_path / f"report_{trace_path.stem}_flamegraph.png")
        flame = browser.evaluate(_FLAME_JS)
        browser.evaluate("document.getElementById('gpu_timeline').scrollIntoView()")
        browser.screenshot(tmp_path / f"report_{trace_path.stem}_timeline.png")
        log = browser.log
    assert log.errors() == []
    assert [u for u in log.requests if not is_local(u)] == []
    assert log.requests == [html.as_uri()]  # one self-contained file, nothing else loaded
    assert flame["kernels"] == pytest.approx(kernel_ns, rel=1e-3)
    # A click zooms: the clicked frame (the narrowest at depth 2) takes the full width.
    assert flame["zoomed"] == pytest.approx(flame["rootWidth"], abs=0.01)
