"""Frame filters for what users read: `folded`, `flamegraph`, `report` and the launch-site
column.  The trace keeps every frame; these run when stacks are read from it.

Each filter is a small `(frames) -> frames` transform on one stack, outermost frame first,
where a frame is a `(name, module)` pair (module "" where unknown: the thread's root, a GPU
op, a frame read from a folded file).  `show_all` (`--all-frames`) turns hiding off.  The
predicates are collector/frames.py's, shared with the collector.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from collector import frames as predicates

FrameRef = tuple[str, str]  # (function name, module path or "")
StackFilter = Callable[[Sequence[FrameRef]], list[FrameRef]]


def hide_interpreter_between_python(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """CPython's own frames between two Python frames go (`<module> (a.py:4);
    PyImport_ImportModuleLevelObject;...;_find_and_load (<frozen ...>)` reads
    `<module> (a.py:4);_find_and_load (...)`): they only say that Python called Python, the
    way py-spy's native mode reads.  Native frames below the innermost Python frame (the C
    code that runs there) stay, and so does every frame that is not the interpreter's (an
    extension's C++ between two Python frames is real work)."""
    python_at = [
        i for i, (name, module) in enumerate(stack) if predicates.is_python_frame(name, module)
    ]
    if len(python_at) < 2:
        return list(stack)
    first, last = python_at[0], python_at[-1]
    return [
        frame
        for i, frame in enumerate(stack)
        if not (
            first < i < last
            and predicates.is_interpreter_frame(*frame)
            and not predicates.is_python_frame(*frame)
        )
    ]


def hide_startup_above_python(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """In a stack with Python frames, the way in to the outermost one goes: the C runtime's
    entry (`_start;__libc_start_main`, `clone3;start_thread`) and the interpreter's start-up
    (`Py_BytesMain;Py_RunMain;pymain_run_python;...;PyEval_EvalCode`, a thread's
    `thread_run`).  They are in every sample of the process, so they only push the program
    down the flamegraph and to the top of a ranking by total.  The thread root stays, and
    so does the frame of an embedding program (its own code calling into Python)."""
    first = next(
        (i for i, (name, module) in enumerate(stack) if predicates.is_python_frame(name, module)),
        None,
    )
    if first is None:
        return list(stack)
    return [
        frame
        for i, frame in enumerate(stack)
        if i == 0
        or i >= first
        or not (predicates.is_interpreter_frame(*frame) or predicates.is_c_runtime_entry(*frame))
    ]


DEFAULT_FILTERS: tuple[StackFilter, ...] = (
    hide_startup_above_python,
    hide_interpreter_between_python,
)


def apply_filters(stack: Sequence[FrameRef], show_all: bool = False) -> list[FrameRef]:
    """A stack as users read it by default; every frame with show_all."""
    out = list(stack)
    if show_all:
        return out
    for stack_filter in DEFAULT_FILTERS:
        out = stack_filter(out)
    return out


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
