"""Where in the user's code: the innermost frame of a stack that users wrote.

A stack (a CPU sample's or a launch stack) names the code that ran; a finding names the line
to change, which is the innermost Python frame outside the installed packages and the
standard library, else the innermost Python frame, else the innermost native frame that is
not the interpreter's own."""

from __future__ import annotations

import re
from collections.abc import Iterable

from collector import frames
from collector.frame_names import shorten_stack
from exporters.perfetto.engine.trace_processor import Trace

# Python code that is not the user's: installed packages and the standard library.
_LIBRARY_PATH = re.compile(r"/(site|dist)-packages/|/lib/python\d[\d.]*/|^<frozen ")
# Kineto's python_function slices: "path/to/file.py(123): func".
_KINETO_PYTHON = re.compile(r"^(?P<path>.*?\.py)\((?P<line>\d+)\): (?P<func>.+)$")

Frame = tuple[str, str]  # (name, module)


def is_python(frame: Frame) -> bool:
    return frames.is_python_frame(*frame)


def is_user_python(frame: Frame) -> bool:
    return is_python(frame) and not _LIBRARY_PATH.search(frame[1])


def _is_cuda(frame: Frame) -> bool:
    return frames.is_cuda_library_frame(*frame)


def location(frames_leaf_first: Iterable[Frame]) -> str:
    """The frame to name for a stack given leaf first ('' for an empty stack): the innermost
    user Python frame, else Python frame; else (a stack without Python, such as the autograd
    thread's) the innermost frame outside the CUDA libraries, framework dispatch and the
    interpreter, else outside the CUDA libraries."""
    stack = list(frames_leaf_first)
    for pick in (is_user_python, is_python):
        for frame in stack:
            if pick(frame):
                return frame[0]
    for frame in stack:
        if not (
            _is_cuda(frame)
            or frames.is_dispatch_frame(frame[0])
            or frames.is_interpreter_frame(*frame)
        ):
            return shorten_stack(frame[0])
    for frame in stack:
        if not _is_cuda(frame):
            return shorten_stack(frame[0])
    return shorten_stack(stack[0][0]) if stack else ""


# The framework's own Python (torch, its compiler and C++ extension glue): the frames a
# module's forward calls down into, not the model code that names the work.
_FRAMEWORK_PATH = re.compile(r"/torch/|/torchvision/|/triton/")
_STDLIB_PATH = re.compile(r"/lib/python\d[\d.]*/(?!site-packages|dist-packages)|^<frozen ")


def model_location(frames_leaf_first: Iterable[Frame]) -> str:
    """Where the host spends time launching a model's GPU work: the innermost Python frame
    outside the framework and the standard library (a module's forward, in the user's code
    or an installed model library such as transformers), else location()."""
    stack = list(frames_leaf_first)
    for frame in stack:
        if (
            is_python(frame)
            and not _FRAMEWORK_PATH.search(frame[1] or frame[0])
            and not _STDLIB_PATH.search(frame[1])
        ):
            return frame[0]
    return location(stack)


_LINE = re.compile(r":\d+\)$")


def function_of(location: str) -> str:
    """`func (file.py)` of `func (file.py:12)`: the function, whatever line ran."""
    return _LINE.sub(")", location)


def kineto_location(slice_name: str) -> str | None:
    """`func (file.py:line)` for a Kineto python_function slice name, else None."""
    m = _KINETO_PYTHON.match(slice_name)
    if m is None:
        return None
    return f"{m['func']} ({m['path'].rsplit('/', 1)[-1]}:{m['line']})"


def kineto_is_user(slice_name: str) -> bool:
    m = _KINETO_PYTHON.match(slice_name)
    return m is not None and not _LIBRARY_PATH.search("/" + m["path"])


def callsite_frames(trace: Trace, callsite_ids: Iterable[int]) -> dict[int, list[Frame]]:
    """The frames of each callsite, leaf first."""
    ids = sorted({int(i) for i in callsite_ids if i is not None})
    if not ids:
        return {}
    rows = trace.query(
        f"""
        WITH RECURSIVE chain(leaf, id, up) AS (
          SELECT id, id, 0 FROM stack_profile_callsite WHERE id IN ({",".join(map(str, ids))})
          UNION ALL
          SELECT chain.leaf, c.parent_id, chain.up + 1
          FROM chain JOIN stack_profile_callsite c ON c.id = chain.id
          WHERE c.parent_id IS NOT NULL
        )
        SELECT chain.leaf, chain.up, coalesce(f.deobfuscated_name, f.name, '[unknown]') AS name,
               coalesce(m.name, '') AS module
        FROM chain
        JOIN stack_profile_callsite c ON c.id = chain.id
        JOIN stack_profile_frame f ON f.id = c.frame_id
        LEFT JOIN stack_profile_mapping m ON m.id = f.mapping
        ORDER BY chain.leaf, chain.up
        """
    )
    frames: dict[int, list[Frame]] = {}
    for row in rows:
        frames.setdefault(int(row["leaf"]), []).append((str(row["name"]), str(row["module"])))
    return frames


def slice_locations(trace: Trace, slice_ids: Iterable[int]) -> dict[int, str]:
    """For traces without launch stacks (converted Kineto): the innermost user Python slice
    enclosing each slice (python_function names), else the innermost enclosing slice."""
    ids = sorted({int(i) for i in slice_ids if i is not None})
    enclosing: dict[int, list[str]] = {sid: [] for sid in ids}
    # One statement per 500 slices, not one per slice: a report on a 1M-slice trace asked
    # hundreds (each a round trip, and a file of the result cache).
    for start in range(0, len(ids), 500):
        values = ",".join(f"({sid})" for sid in ids[start : start + 500])
        for r in trace.query(
            f"with s(id) as (values {values}) select s.id as sid, a.name from s "
            "join ancestor_slice(s.id) a order by s.id, a.depth desc"
        ):
            enclosing[int(r["sid"])].append(str(r["name"]))
    out: dict[int, str] = {}
    for sid in ids:
        loc = enclosing_location(enclosing[sid])
        if loc:
            out[sid] = loc
    return out


def enclosing_location(names: list[str]) -> str:
    """Of enclosing slices' names (innermost first): the innermost user Python function,
    else the innermost with a place in the code, else the innermost ("" for none)."""
    pick = next((n for n in names if kineto_is_user(n)), None)
    pick = pick or next((n for n in names if kineto_location(n)), None)
    if pick is not None:
        return kineto_location(pick) or pick
    return names[0] if names else ""


def weighted_locations(weights: dict[str, int], top: int = 3) -> list[tuple[str, int]]:
    """The heaviest locations first."""
    return sorted(((k, v) for k, v in weights.items() if k), key=lambda kv: -kv[1])[:top]
