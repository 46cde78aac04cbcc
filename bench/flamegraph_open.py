"""How long a flamegraph SVG takes to open in a browser, for long and deep profiles.

    python3 bench/flamegraph_open.py [--json bench/results/flamegraph_open.json]

Synthetic folded profiles shaped like a training run's merge-mode stacks (a thread, a
Python call chain of `depth` frames with branching at every level, native leaves, GPU ops
under launch contexts), rendered by exporters/report/flamegraph.py, opened as a file in
headless Chromium (tests/browser.py; Debian's chromium).  Open time: the browser's
navigation timing to the end of the load event (parsed, laid out, the graph's script run)
plus one painted frame (a screenshot forces the paint).  First zoom: a click on the widest
frame under the root until the zoom is drawn (it inflates the sliver data and reads every
frame).
Prints a table and writes the numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from exporters.report.flamegraph import render_svg  # noqa: E402
from tests.browser import BrowserError, Chromium  # noqa: E402

# (distinct stacks, deepest Python chain)
CASES = ((2_000, 40), (20_000, 80), (60_000, 150), (60_000, 300))


def profile(stacks: int, depth: int, seed: int = 22) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    lines = []
    for i in range(stacks):
        d = rng.randint(depth // 4, depth)
        chain = [f"f{level}_{rng.randint(0, 3)} (mod{level % 17}.py:{level})" for level in range(d)]
        if i % 5 == 0:
            leaf = [f"cudaLaunchKernel;[GPU_Kernel]kernel_{rng.randint(0, 50)}"]
        else:
            leaf = [f"native_{rng.randint(0, 30)}"]
        lines.append((";".join(["MainThread", *chain, *leaf]), rng.expovariate(1e-6)))
    return lines


def measure(stacks: int, depth: int, work: Path, browser: Chromium) -> dict[str, float]:
    lines = profile(stacks, depth)
    t0 = time.perf_counter()
    svg = render_svg(lines, title=f"{stacks} stacks, depth {depth}")
    render_s = time.perf_counter() - t0
    path = work / f"flame_{stacks}_{depth}.svg"
    path.write_text(svg)
    browser.navigate("about:blank")
    browser.wait_for("document.readyState === 'complete'")
    browser.navigate(path.as_uri())
    _wait_complete(browser)
    # The browser's own clock: navigation start to the end of the load event (parsed,
    # laid out, the graph's script run); then a screenshot forces one painted frame.
    load_ms = browser.evaluate(
        "performance.getEntriesByType('navigation')[0].loadEventEnd", timeout=30
    )
    t0 = time.perf_counter()
    browser.call("Page.captureScreenshot", {"format": "png"}, timeout=120)
    open_s = load_ms / 1000 + (time.perf_counter() - t0)
    height = browser.evaluate("document.documentElement.getAttribute('height')")
    drawn = browser.evaluate("document.querySelectorAll('.fg-f').length")
    zoom_s = browser.evaluate(_FIRST_ZOOM_JS, timeout=120)
    return {
        "stacks": stacks,
        "max_depth": depth,
        "frames_drawn": drawn,
        "svg_mb": round(len(svg.encode()) / 1e6, 2),
        "height_px": float(height),
        "render_s": round(render_s, 3),
        "open_s": round(open_s, 3),
        "first_zoom_s": round(zoom_s, 3),
    }


# A click on the widest frame under the root, timed to the zoom drawn (the reset button
# shows): the first zoom inflates the sliver data and reads every frame.
_FIRST_ZOOM_JS = """(async () => {
  const reset = document.querySelector('.fg-reset');
  const first = [...document.querySelectorAll('.fg-f')].filter(g => +g.dataset.d === 1)
    .sort((a, b) => b.dataset.v - a.dataset.v)[0];
  const t0 = performance.now();
  first.dispatchEvent(new MouseEvent('click', {bubbles: true}));
  while (reset.getAttribute('visibility') !== 'visible')
    await new Promise(r => setTimeout(r, 10));
  await new Promise(r => requestAnimationFrame(() => setTimeout(r, 0)));
  return (performance.now() - t0) / 1000;
})()"""


def _wait_complete(browser: Chromium, timeout: float = 120) -> None:
    """Poll until the file's document is complete.  Short evaluations: one sent while the
    navigation swaps the page's context can go unanswered."""
    deadline = time.perf_counter() + timeout
    state = ""
    while time.perf_counter() < deadline:
        time.sleep(0.25)  # evaluations while an SVG parses can stall it: poll slowly
        try:
            state = browser.evaluate("location.href + ' ' + document.readyState", timeout=5)
            if state.startswith("file:") and state.endswith(" complete"):
                return
        except BrowserError as exc:
            state = str(exc)[:200]
    raise BrowserError(f"the SVG did not finish loading: {state}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", type=Path, default=REPO / "bench/results/flamegraph_open.json")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp, Chromium(width=1300, height=1000) as browser:
        for stacks, depth in CASES:
            rows.append(measure(stacks, depth, Path(tmp), browser))
            r = rows[-1]
            print(
                f"{r['stacks']:>7} stacks  depth {r['max_depth']:>4}  {r['frames_drawn']:>7} frames"
                f"  {r['svg_mb']:>6.2f} MB  {r['height_px']:>6.0f} px  render {r['render_s']:.2f} s"
                f"  open {r['open_s']:.2f} s  first zoom {r['first_zoom_s']:.2f} s"
            )
    args.json.write_text(json.dumps({"cases": rows}, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
