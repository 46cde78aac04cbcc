"""CPU stacks of real Python programs as users read them: `record --no-gpu` of
tests/native/nested_calls.py (Python calling Python through sorted's key, map, a class,
an import) on Debian's python3 and the CPythons scripts/build_cpythons.sh builds, then
`folded` and `report` on the trace.  By default no stack has an interpreter frame between
two Python frames, stacks are shallower, and `report` names the hot function."""

from __future__ import annotations

import statistics
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from collector import frames as predicates
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.report.queries import collect

from .conftest import REPO, run_cli
from .test_cpu_sampler import FREQ, python_interpreters

SCRIPT = REPO / "tests" / "native" / "nested_calls.py"
SECONDS = "2"  # ~2,000 samples at 999 Hz


def folded_lines(trace: Path, *flags: str) -> list[tuple[list[str], int]]:
    proc = run_cli("folded", trace, "--mode", "cpu", "--unit", "samples", *flags)
    assert proc.returncode == 0, proc.stderr
    out = []
    for line in proc.stdout.splitlines():
        stack, _, count = line.rpartition(" ")
        out.append((stack.split(";")[1:], int(count)))  # [0] is the thread
    return out


def interpreter_between_python(frames: list[str]) -> bool:
    python_at = [i for i, f in enumerate(frames) if predicates.is_python_frame(f)]
    return len(python_at) > 1 and any(
        predicates.is_interpreter_frame(f) for f in frames[python_at[0] + 1 : python_at[-1]]
    )


def python_paths(lines: list[tuple[list[str], int]]) -> Counter[tuple[str, ...]]:
    """Samples per sequence of the program's Python frames (the import system's are
    collapsed by default, one frame per import; record's startup hook, sitecustomize.py,
    is hidden as the recorder's: a sample can land in it while Python starts)."""
    out: Counter[tuple[str, ...]] = Counter()
    for frames, n in lines:
        program = (
            f
            for f in frames
            if predicates.is_python_frame(f)
            and not predicates.is_import_machinery_frame(f)
            and "(sitecustomize.py:" not in f
        )
        out[tuple(program)] += n
    return out


def import_machinery_runs(frames: list[str]) -> int:
    """Two import-system frames in a row: what the default view collapses."""
    return sum(
        predicates.is_import_machinery_frame(a) and predicates.is_import_machinery_frame(b)
        for a, b in pairwise(frames)
    )


def median_depth(lines: list[tuple[list[str], int]]) -> float:
    return statistics.median(d for frames, n in lines for d in [len(frames)] * n)


@pytest.fixture(scope="module", params=python_interpreters())
def python_trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = tmp_path_factory.mktemp("pystacks") / "py.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--freq", FREQ, "-o", trace, "--", request.param, SCRIPT, SECONDS
    )
    assert proc.returncode == 0, proc.stderr
    return trace


def test_no_interpreter_frame_between_python_frames(python_trace: Path) -> None:
    shown = folded_lines(python_trace)
    every = folded_lines(python_trace, "--all-frames")
    # The trace keeps the interpreter's frames (else this test could not fail) ...
    assert sum(n for f, n in every if interpreter_between_python(f)) > 0
    # ... and folded shows none of them between Python frames.
    assert [f for f, _ in shown if interpreter_between_python(f)] == []
    # The import (importlib.import_module each round) is five import-system frames deep
    # with every frame, one by default.
    assert sum(n for f, n in every if import_machinery_runs(f)) > 0
    assert [f for f, _ in shown if import_machinery_runs(f)] == []
    assert sum(n for _, n in shown) == sum(n for _, n in every)
    assert median_depth(shown) < median_depth(every)
    # Nothing of the program is lost: the same Python frames in the same samples.
    assert python_paths(shown) == python_paths(every)


def test_report_names_the_hot_function(python_trace: Path) -> None:
    with open_trace(python_trace) as t:
        report = collect(t, python_trace.name, top=10_000)
    section = next(s for s in report.sections if s.key == "top_functions")
    first = section.rows[0]
    # leaf() does the work: most self time, with the interpreter's integer arithmetic and
    # allocator under it counted as its own (a CPython built with symbols names them: alone,
    # _PyObject_Malloc held as many self samples as leaf, ~23%, and topped the table in one
    # CI run of two), and in ~90% of the samples, counted once each however it was called
    # (sorted's key, map, the import).
    assert first["function"] == "leaf (nested_calls.py)", section.rows[:3]
    assert first["self_pct"] > 60
    assert 60 < first["total_pct"] <= 100
    # The call machinery (PyEval_EvalCode, _PyFunction_Vectorcall, ...) is in nearly every
    # sample when shown; hidden between Python frames, none of it has a larger total than
    # the hot function (the interpreter's own work under leaf, PyObject_Free, may show).
    above = [r["function"] for r in section.rows if r["total_pct"] > first["total_pct"]]
    assert above and all(f.endswith(".py)") for f in above), above
