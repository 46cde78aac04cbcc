"""Frames of folded stacks for what users read: `folded`, `flamegraph`, `report` and the
launch-site column.  The trace keeps every frame; collector/frames.py's filters run here
when stacks are read from it (`show_all`: `--all-frames`).
"""

from __future__ import annotations

from collections.abc import Sequence

from collector import frames as predicates
from collector.frames import FrameRef, apply_filters


def launched_from(frames: Sequence[str]) -> str:
    """The code that launched, given a launch stack's frame names outermost first (no
    thread root): the innermost Python frame if it has one, else its innermost frame outside
    the CUDA libraries and framework dispatch, else (a stack of framework frames only, such
    as the autograd thread's) the innermost frame outside the CUDA libraries."""
    for frame in reversed(frames):
        if predicates.is_python_frame(frame):
            return frame
    for frame in reversed(frames):
        if not predicates.is_cuda_library_frame(frame) and not predicates.is_dispatch_frame(frame):
            return frame
    for frame in reversed(frames):
        if not predicates.is_cuda_library_frame(frame):
            return frame
    return frames[-1] if frames else ""


def folded_frames(stack: str, modules: str | None) -> list[FrameRef]:
    """A folded stack's frames (`a;b;c`) paired with their modules (`;`-joined in the same
    order, as stacks.sql writes them); names only where the modules are missing or do not
    line up (a context of enclosing slices, a GPU op without an API call)."""
    names = stack.split(";")
    mods = modules.split(";") if modules is not None else []
    if len(mods) != len(names):
        mods = [""] * len(names)
    return list(zip(names, mods, strict=True))


def filter_folded(stack: str, modules: str | None, show_all: bool = False) -> str:
    """A folded stack as users read it by default (see apply_filters)."""
    if show_all:
        return stack
    return ";".join(name for name, _ in apply_filters(folded_frames(stack, modules)))
