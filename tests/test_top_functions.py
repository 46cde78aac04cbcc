"""The report's top functions by self time: a Python function carries the interpreter's own
work under it (its allocator, its integer arithmetic), as a Python profiler shows it; that
work stays its own where an extension, not Python, called it, and every frame counts alone
with --all-frames."""

from __future__ import annotations

from exporters.report.top_functions import rank_functions

PY = "/usr/bin/python3.13"
NUMPY = "/venv/lib/python3.13/site-packages/numpy/_core/_multiarray_umath.so"
STACKS = [
    # leaf's own lines, and the interpreter's arithmetic and allocator under them
    ("main;<module> (app.py:1);leaf (app.py:5)", ";app.py;app.py", 4),
    (
        "main;<module> (app.py:1);leaf (app.py:5);_PyLong_Add;_PyObject_Malloc",
        f";app.py;app.py;{PY};{PY}",
        6,
    ),
    # the allocator called by an extension's loop: the extension's work, not Python's
    (
        "main;<module> (app.py:1);work (app.py:9);ufunc_loop;_PyObject_Malloc",
        f";app.py;app.py;{NUMPY};{PY}",
        5,
    ),
    # a thread without Python: its interpreter-named frames stay as they are
    ("other;start_thread;_PyObject_Malloc", f";/lib/libc.so.6;{PY}", 3),
]


def _self(rows: list[dict[str, object]]) -> dict[object, object]:
    return {r["function"]: r["self_samples"] for r in rows}


def test_python_function_holds_the_interpreter_work_under_it() -> None:
    by_self = _self(rank_functions(STACKS))
    assert by_self["leaf (app.py)"] == 10
    assert by_self["_PyObject_Malloc"] == 5 + 3
    assert "_PyLong_Add" not in by_self
    rows = rank_functions(STACKS)
    assert rows[0]["function"] == "leaf (app.py)"
    assert sum(int(r["self_samples"]) for r in rows) == 4 + 6 + 5 + 3  # nothing lost


def test_every_frame_alone_with_all_frames() -> None:
    by_self = _self(rank_functions(STACKS, all_frames=True))
    assert by_self["leaf (app.py)"] == 4
    assert by_self["_PyObject_Malloc"] == 6 + 5 + 3
