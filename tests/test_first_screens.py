"""What a person sees first, in headless Chromium at a laptop's window (1280x800): the
flamegraph SVG (`xpu-perf flamegraph`) and the HTML report (`report -o x.html`) of traces
with steps and a known cause.  Checked from the page itself (the DOM's boxes, the text's
rendered widths) and from its screenshot (kept under tests/artifacts/)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from . import chain_traces as ct
from .browser import Chromium, is_local
from .conftest import run_cli
from .test_analysis_chain import HOST_STACK, LOADER_STACK, _worker_processes, _workers
from .view_traces import DATA_LOCATION, write_two_rank_run

WINDOW = (1280, 800)  # the browser window; its viewport is what is left under the browser's bars


@dataclass(frozen=True)
class Case:
    trace: Path
    span: str  # the span's words the first screen must say
    roots: set[str]  # the flamegraph's root frames (processes and threads), as named
    location: str  # the first finding's line


def _loader(tmp: Path) -> Case:
    """A training loop (main) waiting on 2 saturated DataLoader worker processes."""
    path = tmp / "loader.perfetto-trace"
    ct.write(
        path,
        [
            ct.Part("samples", 1_000_000, HOST_STACK),
            ct.Part("wait", 8_000_000, LOADER_STACK, "poll"),
        ],
        ["host_compute", "data_loading"],
        extra=_worker_processes(2),
        on_wait=_workers(2, 1, True),
    )
    return Case(
        path,
        "steps 2-10",
        {"main", "DataLoader worker 0", "DataLoader worker 1"},
        "SlowDecode.__getitem__ (train.py:21)",
    )


def _two_ranks(tmp: Path) -> Case:
    """Two ranks of 12 steps each, one GPU each, data loading in every gap."""
    run = write_two_rank_run(tmp / "two_ranks.perfetto-trace")
    return Case(run.path, "steps 2-12 of 2 processes", {"rank 0", "rank 1"}, DATA_LOCATION)


@pytest.fixture(scope="module", params=["loader", "two_ranks"])
def case(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Case:
    tmp = tmp_path_factory.mktemp(f"first_screen_{request.param}")
    return {"loader": _loader, "two_ranks": _two_ranks}[request.param](tmp)


# -- the flamegraph SVG -------------------------------------------------------------------

_SVG_JS = """(() => {
  const svg = document.documentElement;
  const box = el => { const b = el.getBBox(); return [b.x, b.x + b.width]; };
  const frames = [...svg.querySelectorAll('.fg-f')].map(g => {
    const r = g.querySelector('rect'), t = g.querySelector('text');
    return {name: g.querySelector('title').textContent.split('\\n')[0],
            d: +g.getAttribute('data-d'), x: +r.getAttribute('x'), w: +r.getAttribute('width'),
            bottom: r.getBoundingClientRect().bottom,
            label: t ? t.textContent : '', text_w: t ? t.getComputedTextLength() : 0,
            text_x: t ? +t.getAttribute('x') : 0};
  });
  return {width: +svg.getAttribute('width'), vw: innerWidth, vh: innerHeight,
          title: svg.querySelector('.fg-title').textContent,
          subtitle: svg.querySelector('.fg-sub').textContent,
          title_box: box(svg.querySelector('.fg-title')),
          subtitle_box: box(svg.querySelector('.fg-sub')), frames};
})()"""

_BARE_NAME = re.compile(r"(python[\d.]*|\d+|.*\bpid \d+|thread \d+)")


def test_flamegraph_first_screen(case: Case, tmp_path: Path) -> None:
    svg = tmp_path / f"{case.trace.stem}.svg"
    proc = run_cli("flamegraph", case.trace, "-o", svg)
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / f"first_screen_flamegraph_{case.trace.stem}.png"
    with Chromium(*WINDOW) as browser:
        browser.navigate(svg.as_uri())
        browser.wait_for("document.readyState === 'complete'", what="the SVG")
        page = browser.evaluate(_SVG_JS)
        browser.screenshot(shot)
        stats = browser.screen_stats(shot)
        assert browser.log.errors() == []
        assert [u for u in browser.log.requests if not is_local(u)] == []
    frames = page["frames"]
    # Not blank: the frames' colours over a good part of the screen.
    assert stats.colours > 20 and stats.inked > 0.15, stats
    # The title says which span the graph covers; title and subtitle are inside the graph.
    assert case.span in page["title"], page["title"]
    for box in (page["title_box"], page["subtitle_box"]):
        assert box[0] >= 0 and box[1] <= page["width"], (box, page["subtitle"])
    assert page["width"] <= page["vw"]  # no sideways scrolling to see the graph
    # The root spans the graph; its children (processes and threads) fill it.
    root = next(f for f in frames if f["d"] == 0)
    assert root["x"] == pytest.approx(10) and root["w"] == pytest.approx(page["width"] - 20)
    tops = [f for f in frames if f["d"] == 1]
    assert sum(f["w"] for f in tops) == pytest.approx(root["w"], abs=0.5)
    # Named as a person knows them, never by the program's name or a number alone.
    assert {f["name"] for f in tops} == case.roots
    assert all(f["label"] == f["name"] for f in tops), tops
    assert not [f for f in tops if _BARE_NAME.fullmatch(f["name"])]
    # The graph's first levels are on the first screen.
    assert max(f["bottom"] for f in frames if f["d"] <= 4) <= page["vh"]
    # Every label fits its frame, and says the frame's name (its start, '..' where cut).
    for f in frames:
        if not f["label"]:
            continue
        assert f["text_x"] >= f["x"] and f["text_x"] + f["text_w"] <= f["x"] + f["w"], f
        shown = f["label"].removesuffix("..")
        assert shown and _op_name(f["name"]).startswith(shown), f
    # A GPU op's frame wide enough for a few letters shows its op's name, not the marker.
    gpu = [f for f in frames if f["name"].startswith("[GPU_") and f["w"] >= 40]
    assert gpu
    for f in gpu:
        assert f["label"] and _op_name(f["name"]).startswith(f["label"].removesuffix("..")), f
        assert not f["label"].startswith("[GPU"), f


def _op_name(frame: str) -> str:
    """A GPU op frame's op (`[GPU_Kernel]gemm` -> `gemm`), any other frame as it is."""
    return frame.split("]", 1)[1] if frame.startswith("[GPU_") else frame


# -- the HTML report ----------------------------------------------------------------------

_REPORT_JS = """(() => {
  const rect = el => { const r = el.getBoundingClientRect(); return [r.top, r.bottom]; };
  const heading = document.getElementById('findings');
  const first = document.querySelector('ol.findings > li');
  const title = first.querySelector('b');
  const where = [...first.querySelectorAll('div')].find(d => d.textContent.startsWith('where'));
  // What the page says above the findings, the links to its sections left out.
  const kids = [...document.body.children];
  return {vw: innerWidth, vh: innerHeight, scroll_w: document.documentElement.scrollWidth,
          heading: rect(heading), title: title.textContent, title_box: rect(title),
          where: where ? where.textContent : '', where_box: where ? rect(where) : [0, 1e9],
          above: kids.slice(0, kids.indexOf(heading)).filter(e => e.tagName !== 'NAV')
                     .map(e => e.innerText).join('\\n')};
})()"""


def test_html_report_first_screen(case: Case, tmp_path: Path) -> None:
    html = tmp_path / f"{case.trace.stem}.html"
    proc = run_cli("report", case.trace, "-o", html)
    assert proc.returncode == 0, proc.stderr
    shot = tmp_path / f"first_screen_report_{case.trace.stem}.png"
    with Chromium(*WINDOW) as browser:
        browser.navigate(html.as_uri())
        browser.wait_for("document.readyState === 'complete'", what="the report")
        page = browser.evaluate(_REPORT_JS)
        browser.screenshot(shot)
        stats = browser.screen_stats(shot)
        assert browser.log.errors() == []
    assert stats.colours > 20 and stats.inked > 0.03, stats  # text, not a blank page
    assert page["scroll_w"] <= page["vw"], page  # nothing runs off to the right
    # The first finding, its title and its line, on the first screen.
    assert page["heading"][0] >= 0 and page["where_box"][1] <= page["vh"], page
    assert page["title_box"][1] <= page["vh"]
    assert case.location in page["title"] and case.location in page["where"], page
    # Above it: one span, said in the steps' own numbers, and one GPU busy figure.
    above = page["above"]
    assert case.span in above, above
    assert above.count("GPU busy") == 1, above
    assert len(re.findall(r"\d%", above)) == 1, above
