"""`xpu-perf view` opens the UI where the answer is: on the steps the report's findings
cover, with the analysis tracks (`report --annotate`) pinned at the top; checked from the
UI's own state in headless Chromium (the visible window, the pinned and ordered tracks), and
screenshots under tests/artifacts/."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporters.analysis import annotate
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.report.ui_opening import find_opening

from .browser import Chromium, is_local
from .conftest import REPO, run_cli
from .report_inputs import STEPS_PER_PROCESS, record_fake_gpu_app, record_fake_steps
from .test_view import _flamegraph_root, _search_and_select
from .view_traces import COUNTERS, DATA_LOCATION, EMPTY_THREADS, STEPS, Run, write_two_rank_run


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return write_two_rank_run(tmp_path_factory.mktemp("view_open") / "two_ranks.perfetto-trace")


@pytest.fixture(scope="module")
def annotated(two_ranks: Run) -> Path:
    out = two_ranks.path.with_name("two_ranks.annotated.perfetto-trace")
    proc = run_cli("report", two_ranks.path, "--annotate", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    focus = json.loads(proc.stdout)["span"]
    assert (focus["focus"], focus["focus_ts"]) == ("steps", two_ranks.focus_ts)
    return out


def test_opening_is_the_findings_focus(two_ranks: Run):
    opening = find_opening(two_ranks.path)
    assert (opening.start, opening.end) == (two_ranks.focus_ts, two_ranks.end_ts)
    assert opening.what == f"steps 2-{STEPS} of 2 processes"
    # The steps are a sliver of the run: what opening on the whole run would show.
    assert (opening.end - opening.start) < 0.03 * (opening.trace_end - opening.trace_start)
    said = opening.describe()
    assert said.startswith(f"opened on steps 2-{STEPS} of 2 processes: 5.008-5.103 s of "), said
    assert "zoom out to the whole run" in said
    active = find_opening(two_ranks.path, "active")
    assert active.start is not None and active.start < two_ranks.first_step_ts  # the copy
    assert active.end == two_ranks.end_ts
    whole = find_opening(two_ranks.path, "all")
    assert (whole.start, whole.end) == (None, None)
    assert "visStart" not in whole.route()


@dataclass
class UiState:
    window: tuple[int, int]  # the visible window, trace ns
    bounds: tuple[int, int]  # the trace's
    pinned: list[str]
    tracks: list[str]  # every track node in display order (collapsed ones too)
    printed: list[str]  # what view printed on stdout
    searched: str  # the page's text once a search selected a slice ('' if none was asked)
    flamegraph_root: str  # the CPU flamegraph's root tooltip ('N, 100.00%')


# The UI's state, from its debug global (`window.app`, ui/src/frontend/debug.ts).
_STATE_JS = """(() => {
  const t = app.trace, w = t.timeline.visibleWindow.toTimeSpan();
  return JSON.stringify({
    window: [String(w.start), String(w.end)],
    bounds: [String(t.traceInfo.start), String(t.traceInfo.end)],
    pinned: t.workspace.pinnedTracks.map(n => n.name),
    tracks: t.workspace.flatTracksOrdered.map(n => n.name),
  });
})()"""


@pytest.fixture
def view_ui(tmp_path: Path) -> Iterator[object]:
    procs: list[subprocess.Popen[str]] = []

    def open_view(trace: Path, shot: str, *flags: str, search: str = "") -> UiState:
        proc = subprocess.Popen(
            [sys.executable, "-m", "collector.cli", "view", "--no-open", "--port", "0",
             *flags, str(trace)],
            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        procs.append(proc)
        assert proc.stdout is not None
        printed = [proc.stdout.readline() for _ in range(3)]
        assert printed[0].startswith("Perfetto UI with "), printed[0] + proc.stderr.read()
        url = printed[0].rsplit(": ", 1)[1].strip()
        with Chromium(width=1600, height=1000) as browser:
            browser.navigate(url)
            browser.wait_for(
                "!!(window.app && app.trace && document.body.innerText.includes('GPU 0 ('))",
                timeout=90,
                what="the trace in the Perfetto UI",
            )
            # The window and the pins are set once the trace is ready (after the tracks
            # appear): wait until the state stops changing.
            last, state = None, ""
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                state = browser.evaluate(_STATE_JS)
                if state == last:
                    break
                last = state
                time.sleep(1)
            flamegraph_root = _flamegraph_root(browser)
            browser.screenshot(tmp_path / shot)
            searched = ""
            if search:
                searched = _search_and_select(browser, search, category=annotate.CATEGORY)
                browser.screenshot(tmp_path / shot.replace(".png", "_searched.png"))
            assert browser.log.exceptions == []
            assert [u for u in browser.log.requests if not is_local(u)] == []
        raw = json.loads(state)
        return UiState(
            window=(int(raw["window"][0]), int(raw["window"][1])),
            bounds=(int(raw["bounds"][0]), int(raw["bounds"][1])),
            pinned=raw["pinned"],
            tracks=raw["tracks"],
            printed=printed,
            searched=searched,
            flamegraph_root=flamegraph_root,
        )

    yield open_view
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=30)


def test_view_opens_on_the_steps_with_the_causes_pinned(annotated: Path, two_ranks: Run, view_ui):
    ui = view_ui(annotated, "view_opens_on_steps.png", search="data loading")
    assert ui.window == (two_ranks.focus_ts, two_ranks.end_ts)  # not the whole run
    assert ui.bounds[1] - ui.bounds[0] > 30 * (ui.window[1] - ui.window[0])
    assert any(
        line.startswith(f"opened on steps 2-{STEPS} of 2 processes: ") for line in ui.printed
    )
    # The steps of both ranks and the idle causes of both GPUs, at the top.
    assert sorted(ui.pinned) == [
        "GPU idle: GPU 0 (H100)",
        "GPU idle: GPU 1 (H100)",
        *(f"steps: {name}" for name in two_ranks.processes),
    ]
    # A GPU's stream before its counters.
    for gpu in ("GPU 0 (H100)", "GPU 1 (H100)"):
        at = next(i for i, name in enumerate(ui.tracks) if name.startswith(gpu))
        under = ui.tracks[at + 1 : at + 2 + len(COUNTERS)]
        assert under == ["Stream 7", *COUNTERS], ui.tracks
    # Threads with neither slices nor samples get no track; the one with samples does.
    for rank in (0, 1):
        pid = 1000 + rank
        for tid in range(pid + 10, pid + 10 + EMPTY_THREADS):
            assert not [n for n in ui.tracks if n.endswith(f" {tid}")], ui.tracks
        assert f"pt_pin_memory {pid + 50}" in ui.tracks
    # The CPU flamegraph the UI opens with counts the samples of the window, not the
    # start-up's (imports: 98% of this run's samples).
    assert ui.flamegraph_root == f"{_perf_samples_in(annotated, ui.window)}, 100.00%"
    # The cause, in words with its line, found by the UI's search.
    assert f"Name\ndata loading: {DATA_LOCATION}\n" in ui.searched, ui.searched[-2000:]


def _perf_samples_in(trace: Path, window: tuple[int, int]) -> int:
    """The perf samples of the process the UI's flamegraph opens on (the one with the latest
    sample, as LinuxPerf picks it) inside `window`."""
    with open_trace(trace) as t:
        return int(
            t.scalar(
                "with last as (select upid from perf_sample join thread using (utid) "
                "where callsite_id is not null order by ts desc limit 1) "
                "select count(*) from perf_sample join thread using (utid) "
                f"where callsite_id is not null and upid = (select upid from last) "
                f"and ts >= {window[0]} and ts <= {window[1]}"
            )
        )


def test_gpu_streams_rank_before_counters(two_ranks: Run):
    """In the trace itself, the order the UI reads (its own stdlib table): each GPU's
    streams first, then its counters in the order they were first written."""
    with open_trace(two_ranks.path) as t:
        t.execute("include perfetto module viz.summary.track_event")
        rows = t.query(
            "select p.name as gpu, g.name, g.order_id from _track_event_tracks_ordered_groups g "
            "join track p on p.id = g.parent_id where p.name glob 'GPU *' "
            "order by p.name, g.order_id"
        )
    for gpu in ("GPU 0 (H100)", "GPU 1 (H100)"):
        assert [r["name"] for r in rows if r["gpu"] == gpu] == ["Stream 7", *COUNTERS]


def test_view_span_all_opens_on_the_whole_run(two_ranks: Run, view_ui):
    ui = view_ui(two_ranks.path, "view_opens_on_whole_run.png", "--span", "all")
    assert ui.window == ui.bounds
    assert ui.pinned == []  # no analysis tracks in this trace


def test_view_of_a_recorded_run_opens_where_report_looks(tmp_path_factory, view_ui):
    """A real `record` of several processes (the fake-CUPTI app, its forked child, a CPU
    program after it), annotated by report: the UI opens on the window the analysis names,
    not the whole run, with the analysis tracks pinned."""
    recorded = record_fake_gpu_app(tmp_path_factory.mktemp("view_open_rec"))
    out = recorded.path.with_name("recorded.annotated.perfetto-trace")
    proc = run_cli("report", recorded.path, "--annotate", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    opening = find_opening(out)
    assert opening.start is not None and opening.end is not None
    with open_trace(out) as t:
        processes = t.scalar("select count(distinct upid) from thread where upid is not null")
    assert processes >= 2
    ui = view_ui(out, "view_recorded_opening.png")
    assert ui.window == (opening.start, opening.end)
    assert ui.window != ui.bounds
    assert opening.describe() + "\n" in ui.printed
    assert [n for n in ui.pinned if n.startswith("GPU idle: GPU 0")], ui.pinned


def test_view_of_a_recorded_multiprocess_run_opens_on_the_steps(tmp_path_factory, view_ui):
    """A real `record` of two processes of one program (fake_app "steps": 30 steps each, the
    GPU idle while the host burns 5 ms preparing the next batch), annotated by report: the UI
    opens on steps 2-30 of both, each process's steps on its own lane and GPU 0's idle causes
    pinned at the top, a gap found by its cause's words."""
    recorded = record_fake_steps(tmp_path_factory.mktemp("view_open_steps"))
    out = recorded.with_name("steps.annotated.perfetto-trace")
    proc = run_cli("report", recorded, "--annotate", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["span"]["focus"] == "steps"
    opening = find_opening(out)
    # From the first process's second step (the second process, started later, may still be
    # in its first step then: "steps 1-30").
    assert re.fullmatch(rf"steps [12]-{STEPS_PER_PROCESS} of 2 processes", opening.what)
    # The commonest cause of the gaps marked (what it is depends on how the two processes
    # and the VM's load interleave: CPU work in burn_cpu_ns, or nothing seen), in words.
    with open_trace(out) as t:
        cause = t.scalar(
            "select s.name from slice s join track t on s.track_id = t.id "
            "where t.name glob 'GPU idle: *' group by s.name order by count(*) desc limit 1"
        )
    assert cause and re.fullmatch(r"[\w ]+: .+", cause) and "_" not in cause.split(":")[0]
    ui = view_ui(out, "view_recorded_steps.png", search=cause)
    assert ui.window == (opening.start, opening.end)
    assert ui.bounds[1] - ui.bounds[0] > ui.window[1] - ui.window[0]
    assert opening.describe() + "\n" in ui.printed
    # Two processes named alike: a lane each, told apart by pid, each numbering its steps.
    steps = sorted(n for n in ui.pinned if n.startswith("steps: "))
    assert len(steps) == 2 and all(re.fullmatch(r"steps: fake_app pid \d+", n) for n in steps)
    assert [n for n in ui.pinned if n.startswith("GPU idle: GPU 0 (")], ui.pinned
    with open_trace(out) as t:
        names = t.query(
            "select t.name as lane, group_concat(s.name) as steps from slice s "
            "join track t on s.track_id = t.id where t.name glob 'steps: *' group by t.id"
        )
    # The steps the findings cover (from the second; a later process's first may overlap).
    every = {f"step {k + 1}" for k in range(STEPS_PER_PROCESS)}
    for lane in names:
        assert every - {"step 1"} <= set(lane["steps"].split(",")) <= every, lane
    # The cause, in words with where it ran, found by the UI's search.
    assert f"Name\n{cause}\n" in ui.searched, ui.searched[-2000:]


def test_view_of_a_json_trace_says_it_opens_on_the_whole_run(tmp_path: Path):
    """The UI opens Kineto JSON itself; the analysis reads converted traces, so view says
    why it opens on the whole run and what gives the analysed view, and still serves."""
    trace = tmp_path / "kineto.json"
    trace.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2}]}))
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "view", "--no-open", "--port", "0", str(trace)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stderr is not None
        first = proc.stdout.readline()
        assert first.startswith("Perfetto UI with "), first
        said = proc.stderr.readline()
        assert said == (
            "xpu-perf view: opening on the whole run (the analysis reads Perfetto traces: "
            f"xpu-perf convert {trace} -o OUT)\n"
        )
    finally:
        proc.terminate()
        proc.wait(timeout=30)
