"""The flamegraph SVG renderer (tree, layout, escaping, elision) and `xpu-perf flamegraph`."""

from __future__ import annotations

import base64
import json
import xml.etree.ElementTree as ET
import zlib
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace
from exporters.report.flamegraph import (
    FRAME_HEIGHT,
    HEADER,
    PAD,
    build_tree,
    fit_label,
    layout,
    render_svg,
)

from .browser import Chromium
from .conftest import run_cli

SVG = "{http://www.w3.org/2000/svg}"


def sliver_data(svg_text: str) -> dict:
    """The frames under a pixel the SVG keeps as data (deflated JSON in base64), by column."""
    data = ET.fromstring(svg_text).find(f"{SVG}script[@class='fg-data']")
    assert data is not None and data.get("data-encoding") == "zlib+base64"
    return json.loads(zlib.decompress(base64.b64decode(data.text or "")))


def frames(svg_text: str) -> list[dict]:
    """Every drawn frame: name, weight, start, depth, and its rect's x/width (parsed as XML,
    so this also checks the SVG is well-formed)."""
    root = ET.fromstring(svg_text)
    out = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") != "fg-f":
            continue
        rect = g.find(f"{SVG}rect")
        title = g.find(f"{SVG}title")
        assert rect is not None and title is not None
        out.append(
            {
                "name": (title.text or "").split("\n")[0],
                "value": float(g.get("data-v", "nan")),
                "start": float(g.get("data-s", "nan")),
                "depth": int(g.get("data-d", "-1")),
                "x": float(rect.get("x", "nan")),
                "width": float(rect.get("width", "nan")),
                # A frame too narrow for a label has no <text>.
                "label": getattr(g.find(f"{SVG}text"), "text", None) or "",
            }
        )
    return out


LINES = [
    ("main;train;forward;[GPU_Kernel]gemm", 600.0),
    ("main;train;forward;[GPU_Kernel]relu", 100.0),
    ("main;train;backward;[GPU_Kernel]gemm", 250.0),
    ("main;eval", 50.0),
    ("main;zero", 0.0),  # zero weights are no frames
]


def test_tree_values_include_children() -> None:
    root = build_tree(LINES)
    assert root.value == 1000
    main = root.children["main"]
    assert main.value == 1000
    train = main.children["train"]
    assert train.value == 950
    assert train.children["forward"].value == 700
    assert sum(c.value for c in train.children.values()) == train.value
    assert "zero" not in main.children


def test_layout_nests_children_inside_their_parent() -> None:
    placed, elided = layout(build_tree(LINES), min_value=0)
    assert elided == 0
    by_name = {(f.name, f.depth): f for f in placed}
    forward = by_name[("forward", 3)]
    backward = by_name[("backward", 3)]
    # Siblings sorted by name, side by side, starting at their parent's start.
    assert backward.start == by_name[("train", 2)].start
    assert forward.start == backward.start + backward.value
    for f in placed:
        if f.depth == 0:
            continue
        parents = [p for p in placed if p.depth == f.depth - 1]
        assert any(p.start <= f.start and f.start + f.value <= p.start + p.value for p in parents)


def test_svg_widths_are_proportional_and_sum_per_level() -> None:
    width = 1000
    fs = frames(render_svg(LINES, width=width))
    plot_w = width - 2 * PAD
    root = next(f for f in fs if f["depth"] == 0)
    assert root["name"] == "all" and root["width"] == pytest.approx(plot_w)
    for f in fs:
        assert f["width"] == pytest.approx(plot_w * f["value"] / 1000, abs=1e-3)
        assert f["x"] == pytest.approx(PAD + plot_w * f["start"] / 1000, abs=1e-3)
    # Depth 1 holds everything; leaves of GPU kernels add up to what was put in.
    assert sum(f["value"] for f in fs if f["depth"] == 1) == 1000
    gemm = sum(f["value"] for f in fs if f["name"] == "[GPU_Kernel]gemm")
    assert gemm == 850


def test_names_are_escaped() -> None:
    nasty = 'std::vector<int>& operator"<<"'
    svg = render_svg([(f"main;{nasty};leaf<&>", 10.0)], width=2000)
    names = {f["name"] for f in frames(svg)}
    assert nasty in names and "leaf<&>" in names
    assert "<int>" not in svg  # only as &lt;int&gt;


def test_narrow_cpu_frames_are_elided_and_said_so() -> None:
    lines = [("main;big", 1_000_000.0), ("main;tiny", 1.0)]
    svg = render_svg(lines, width=1000, min_width=0.1)
    names = {f["name"] for f in frames(svg)}
    assert "tiny" not in names and "big" in names
    # The elided weight still counts in its parent, and the SVG says a frame is missing.
    main = next(f for f in frames(svg) if f["name"] == "main")
    assert main["value"] == 1_000_001.0
    assert "1 CPU frame narrower than 0.1 px not drawn" in svg
    # Without a minimum it is kept, as data the script draws on zoom (a sliver).
    data = sliver_data(render_svg(lines, width=1000, min_width=0))
    assert [n for n, _ in data["names"]] == ["tiny"]


def test_narrow_gpu_frames_are_never_elided() -> None:
    """Next to seconds of CPU a kernel is a sliver: never elided, kept as sliver data
    (drawn on zoom) where it is under a pixel."""
    lines = [
        ("main;cpu_work", 10_000_000.0),
        ("main;launch;cudaLaunchKernel;[GPU_Kernel]short", 3.0),
        ("main;launch;cudaMemcpy;[GPU_Memcpy]copy", 2.0),
    ]
    svg = render_svg(lines, width=1000, min_width=0.1)
    fs = frames(svg)
    data = sliver_data(svg)
    names = {f["name"] for f in fs} | {n for n, _ in data["names"]}
    assert {"launch", "cudaLaunchKernel", "[GPU_Kernel]short", "[GPU_Memcpy]copy"} <= names
    gpu = sum(f["value"] for f in fs if f["name"].startswith("[GPU_"))
    gpu += sum(
        value
        for name, value in zip(data["name"], data["value"], strict=True)
        if data["names"][name][0].startswith("[GPU_")
    )
    assert gpu == 5.0


def test_labels_fit_their_frame() -> None:
    assert fit_label("forward", 500) == "forward"
    # 60 px hold 8 characters of 7.08 px: 6 of the name and the '..' mark.
    assert fit_label("a_rather_long_function_name", 60) == "a_rath.."
    assert fit_label("forward", 10) == ""


def test_bad_graph_id_is_refused() -> None:
    with pytest.raises(ValueError):
        render_svg(LINES, graph_id="x');alert(1);('")


def test_flamegraph_cli_gpu_total_is_kernel_time(example_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "gpu.svg"
    # The whole trace (the default, the steady state: tests/test_stack_span.py).
    proc = run_cli("flamegraph", example_trace, "-o", out, "--mode", "gpu", "--span", "all")
    assert proc.returncode == 0, proc.stderr
    fs = frames(out.read_text())
    with open_trace(example_trace) as t:
        kernel_ns = t.scalar("select sum(dur) from slice where category = 'kernel'")
        gpu_ns = t.scalar(
            "select sum(dur) from slice where category in ('kernel', 'memcpy', 'memset')"
        )
    drawn_kernels = sum(f["value"] for f in fs if f["name"].startswith("[GPU_Kernel]"))
    assert drawn_kernels == pytest.approx(kernel_ns, rel=1e-3)
    assert next(f for f in fs if f["depth"] == 0)["value"] == gpu_ns
    assert "gpu.svg: " in proc.stderr


def test_flamegraph_cli_errors_are_one_line(example_trace: Path, tmp_path: Path) -> None:
    cases = (
        (("flamegraph", tmp_path / "none.perfetto-trace", "-o", tmp_path / "a.svg"), "no such"),
        # A converted Kineto trace has no CPU samples.
        (("flamegraph", example_trace, "-o", tmp_path / "b.svg", "--mode", "cpu"), "nothing"),
        (("flamegraph", example_trace, "-o", tmp_path / "c.svg", "--width", "5"), "--width"),
    )
    for args, message in cases:
        proc = run_cli(*args)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.glob("*.svg*"))


def test_icicle_base_on_top_and_height_of_what_is_drawn() -> None:
    """The root row sits right under the header (a browser opens on it, however deep the
    stacks), each level one row lower; the SVG ends under its deepest drawn frame: a deep
    stack too narrow to draw adds no height."""
    deep = ";".join(f"f{i}" for i in range(200))
    lines = [*LINES, (deep, 0.000001)]
    svg = render_svg(lines, width=600)
    root = ET.fromstring(svg)
    rects = {
        int(g.get("data-d")): float(g.find(f"{SVG}rect").get("y"))
        for g in root.iter(f"{SVG}g")
        if g.get("class") == "fg-f"
    }
    assert rects[0] == HEADER
    assert all(rects[d] == HEADER + d * FRAME_HEIGHT for d in rects)
    drawn_depth = max(rects)
    assert drawn_depth < 10  # the 200-deep sliver is not drawn
    assert float(root.get("height")) == HEADER + (drawn_depth + 1) * FRAME_HEIGHT + PAD


# 400 slivers under `narrow` (each ~0.03 px unzoomed at 1000 px: data, not elements), one
# wide sibling.
SLIVER_LINES = [("main;wide", 1_000_000.0)] + [
    (f"main;narrow;leaf{i:03d}", 30.0) for i in range(400)
]


def test_slivers_are_data_not_elements() -> None:
    svg = render_svg(SLIVER_LINES, width=1000, min_width=0.01)
    names = {f["name"] for f in frames(svg)}
    assert "wide" in names and not any(n.startswith("leaf") for n in names)
    rows = sliver_data(svg)
    assert len(rows["name"]) == len(rows["start"]) == len(rows["depth"]) == 400  # the leaves
    # (narrow itself is 11.6 px wide), each at its place: 30 wide, side by side under main;narrow
    assert rows["value"] == [30.0] * 400 and set(rows["depth"]) == {3}
    assert rows["start"] == [30.0 * i for i in range(400)]  # narrow sorts before wide
    assert {n for n, _ in rows["names"]} == {f"leaf{i:03d}" for i in range(400)}


_ZOOM_JS = """(async () => {
  const narrow = [...document.querySelectorAll('.fg-f')].find(
    g => g.querySelector('title').textContent.startsWith('narrow\\n'));
  narrow.dispatchEvent(new MouseEvent('click', {bubbles: true}));
  // The slivers are inflated first: the zoom follows in a later task.
  for (let i = 0; i < 100 && document.querySelectorAll('.fg-f').length === 4; i++)
    await new Promise(r => setTimeout(r, 50));
  const leaves = [...document.querySelectorAll('.fg-f')].filter(
    g => g.querySelector('title').textContent.startsWith('leaf') && g.style.display !== 'none');
  return {leaves: leaves.length,
          width: +leaves[0].querySelector('rect').getAttribute('width')};
})()"""


def test_zoom_draws_slivers_in_chromium(tmp_path: Path) -> None:
    """A click on their parent widens the slivers: the script makes them elements then,
    drawn at their zoomed width."""
    path = tmp_path / "slivers.svg"
    path.write_text(render_svg(SLIVER_LINES, width=1000, min_width=0.01))
    with Chromium(width=1100, height=800) as browser:
        browser.navigate(path.as_uri())
        browser.wait_for("document.readyState === 'complete'", what="the SVG")
        assert browser.evaluate("document.querySelectorAll('.fg-f').length") == 4
        zoomed = browser.evaluate(_ZOOM_JS)
        assert browser.log.exceptions == []
    assert zoomed["leaves"] == 400
    assert zoomed["width"] == pytest.approx((1000 - 2 * PAD) / 400, rel=1e-6)


_SEARCH_JS = """(async () => {
  window.prompt = () => 'leaf';
  document.querySelector('.fg-search').dispatchEvent(new MouseEvent('click', {bubbles: true}));
  const matched = document.querySelector('.fg-matched');
  for (let i = 0; i < 100 && !matched.textContent; i++)
    await new Promise(r => setTimeout(r, 50));
  return matched.textContent;
})()"""


def test_search_counts_slivers_in_chromium(tmp_path: Path) -> None:
    """Search reads the inflated slivers too: the 400 leaves, data only until a zoom, are
    400 x 30 of 1,012,000 (1.2%)."""
    path = tmp_path / "slivers.svg"
    path.write_text(render_svg(SLIVER_LINES, width=1000, min_width=0.01))
    with Chromium(width=1100, height=800) as browser:
        browser.navigate(path.as_uri())
        browser.wait_for("document.readyState === 'complete'", what="the SVG")
        assert browser.evaluate(_SEARCH_JS) == "Matched: 1.2%"
        assert browser.log.exceptions == []


def test_zoom_draws_only_what_a_pixel_shows_in_chromium(tmp_path: Path) -> None:
    """A zoom draws frames of a pixel or more, as the first view does: `tiny` (kept: 0.006
    px unzoomed, over the 0.001 px minimum) is 0.5 px wide zoomed on `narrow` and stays
    data (making every sub-pixel sliver of a deep profile an element made a first zoom
    take seconds)."""
    path = tmp_path / "slivers.svg"
    path.write_text(render_svg([*SLIVER_LINES, ("main;narrow;tiny", 5.0)], min_width=0.001))
    with Chromium(width=1100, height=800) as browser:
        browser.navigate(path.as_uri())
        browser.wait_for("document.readyState === 'complete'", what="the SVG")
        zoomed = browser.evaluate(_ZOOM_JS)
        shown = browser.evaluate(
            "[...document.querySelectorAll('.fg-f')].filter(g => g.style.display !== 'none')"
            ".map(g => [g.querySelector('title').textContent.split('\\n')[0],"
            " +g.querySelector('rect').getAttribute('width')])"
        )
        assert browser.log.exceptions == []
    assert zoomed["leaves"] == 400
    assert "tiny" in {n for n, _ in sliver_data(path.read_text())["names"]}
    assert "tiny" not in {name for name, _ in shown}
    assert min(width for _, width in shown) >= 1.0
