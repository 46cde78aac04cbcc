"""No benchmark history in the code's comments (issue 36, item 4): a timing quoted beside
what it was compared with ("took 0.3 s", "0.07 s against 0.15 s", "instead of 1.9 s")
goes stale when the code or the machine changes.  Measurements go to docs/benchmarks.md
(its section "Measurements formerly in code comments") and to commit messages; a comment
says why.  Limits and constants ("4 MiB cap", "every 100 ms") are not timings of a run
and are not matched."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCES = ("collector", "exporters", "cupti_inject")
SUFFIXES = {".py", ".c", ".h", ".sql"}
_NUMBER = r"~?[0-9][0-9.,]*(?:-[0-9][0-9.,]*)? ?(?:s|ms|us|ns|MB|GB|x)\b"
# A measured timing: a verb of cost or a comparison, then a number with its unit, in one
# clause.
TIMING = re.compile(rf"\b(?:took|costs?|against|instead of)\b[^.;:\n]*?{_NUMBER}")


def timings(text: str) -> list[str]:
    return [m.group(0) for m in TIMING.finditer(text)]


def test_the_pattern_finds_measurements_not_limits() -> None:
    assert timings("# a rank window over every copy took 0.3 s on 52k copies")
    assert timings('"""restored in 0.27 s instead of 0.6-1.5 s"""')
    assert timings("-- 0.8 s against 0.2 s over 740k slices")
    assert timings("/* one chain over ~45 values cost ~100 ns. */")
    assert not timings("ringbuf_pages = 1024  # 4 MiB: ~2000 samples between two 100 ms drains")
    assert not timings("# The timed window opens and closes on time, not at the next 50 ms poll.")
    assert not timings("# Level 10 makes a trace smaller for many times the deflate CPU")


def test_no_timings_in_the_code() -> None:
    found = []
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file():
                for line_no, line in enumerate(path.read_text().splitlines(), 1):
                    found += [f"{path.relative_to(ROOT)}:{line_no}: {t}" for t in timings(line)]
    assert found == [], "move the measurement to docs/benchmarks.md; say why in the comment"
