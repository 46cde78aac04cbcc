"""What a frame is, and which frames users see: the one set of frame predicates and stack
filters every part of xpu-perf uses.

A frame is known by its function name and its module (the mapping: an ELF path, or for a
Python frame its source file).  The collector uses these when it builds stacks (dropping the
interpreter's unnamed addresses, the tracer's own frames); `exporters/folded/frames.py`
builds the display filters on them.  This module imports nothing of the project, so the
lowest layer (`collector.model`) can use it.

The filters are small `(frames) -> frames` transforms on one stack, outermost frame first,
where a frame is a `(name, module)` pair (module "" where unknown: the thread's root, a GPU
op, a frame read from a folded file), in the manner of pyinstrument's processors; `show_all`
(`--all-frames`) turns hiding off.  They run when stacks are read (`folded`, `flamegraph`,
`report`, the launch stack shown on an API slice); the trace keeps every frame.

Decided by module first, by name second: a name alone cannot tell CPython's
`PyObject_Call` from an extension's function of the same prefix, but the frames of a trace
written before modules were kept, or of a folded file, have only names.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from functools import lru_cache

# `name (file.py:12)`: how the collector names a Python frame (a line may be 0 or missing
# in a frozen module's frame, the file a pseudo-file such as <string>).
_PYTHON_NAME = re.compile(r" \([^()]*:\d+\)$")

# The interpreter's own objects: the python3.X executable (Debian links CPython statically
# into it) and libpython3.X.so (other distributions, embedders).
_INTERPRETER_MODULE = re.compile(r"^(python\d[\d.]*[a-z]*|libpython\d[\d.]*[a-z]*\.so[\d.]*)$")

# CPython's C functions that only run Python code: the eval loop, the call machinery, import,
# the start-up path from main() to the first Python frame.  Exported names (`Py*`, `_Py*`)
# and the static ones debug builds and libpython.so keep symbols for.
_INTERPRETER_NAME = re.compile(
    r"^_?(Py_|PyObject_|PyEval_|PyImport_|PyRun_|PyCFunction_|PyVectorcall_|PyFunction_"
    r"|PyMethod_|PyCode_|PyGen_|PyIter_|PyThread_|PyModule_|PyCallIter_|PyMethodDescr_)\w*$"
    r"|^_PyEval\w*$"
    r"|^(method_vectorcall\w*|cfunction_\w+|slot_tp_\w+|vectorcall_\w+|wrapper_call\w*"
    r"|function_code_fastcall|call_function\w*|object_vacall|_?[Pp]ymain_\w+"
    r"|builtin_exec\w*|builtin___import__\w*|run_mod|run_eval_code_obj|pyrun_\w+|thread_run"
    r"|t_bootstrap|import_find_and_load|exec_code_in_module|module_exec|do_call_core"
    r"|partial_call|partial_vectorcall|context_run|gen_send_ex2?)$"
)
# Unnamed addresses of a module (`python3.12+0x6bcf22`): the symbolizer's name for a pc in
# a static function of a stripped object.
_ADDRESS = re.compile(r"^(?P<module>[^+\s]+)\+0x[0-9a-f]+$")

# Frames of the CUDA libraries (and unnamed addresses), which launch on behalf of the code
# that called them; and frames of framework dispatch (PyTorch's operator machinery, the
# interpreter), which run code users wrote rather than being it.
_CUDA = re.compile(
    r"^(cuda|cu[A-Z]|cublas|cudnn|nccl|cutlass|__device_stub__|lib[\w.+-]*\.so[\d.]*\+0x|0x|\[)"
)
_DISPATCH = re.compile(r"^(at::|c10::|std::|torch::(?!autograd::generated::)|void |_Py|Py[A-Z])")


# The C runtime's entry into a program or a thread (`_start` -> `__libc_start_main` -> main,
# `clone3` -> `start_thread` -> the thread function): in the C library or the dynamic loader.
_C_RUNTIME_MODULE = re.compile(r"^(libc[.-]|libpthread[.-]|ld-linux|ld-musl|libc\.musl)")
_C_RUNTIME_NAME = re.compile(
    r"^(_start|__libc_start_main\w*|__libc_start_call_main|start_thread|clone3?|thread_start)$"
)


def basename(module: str) -> str:
    return module.rsplit("/", 1)[-1]


def is_python_module(module: str) -> bool:
    """A Python source file, or the pseudo-file of code without one (`<string>` for
    `python -c`, `<stdin>`, `<frozen importlib._bootstrap>`)."""
    name = basename(module)
    return name.endswith(".py") or (name.startswith("<") and name.endswith(">"))


def is_python_frame(name: str, module: str = "") -> bool:
    """A frame of Python code: by its module where known, else by its `f (file.py:12)` name."""
    if module:
        return is_python_module(module)
    return bool(_PYTHON_NAME.search(name))


# CPython's machinery written in Python: the import system (frozen since 3.3) and the runner
# of `python -m` (frozen since 3.11, a stdlib runpy.py before).  An import is five of these
# frames per nested module (`_find_and_load;_find_and_load_unlocked;_load_unlocked;
# exec_module;_call_with_frames_removed`), which is why tracebacks leave them out.
_IMPORT_FILES = frozenset(
    {"<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"}
)
_RUNNER_FILES = frozenset({"<frozen runpy>", "runpy.py"})
_PYTHON_FILE = re.compile(r" \((?P<file>[^()]*):\d+\)$")


def python_file(name: str, module: str = "") -> str:
    """A Python frame's file name (no directory): from its module where known, else from
    its `f (file.py:12)` name; "" for other frames."""
    if module:
        return basename(module) if is_python_module(module) else ""
    found = _PYTHON_FILE.search(name)
    return basename(found.group("file")) if found else ""


# A bounded memo of a pure function of the frame's strings (no state kept per trace).
@lru_cache(maxsize=65536)
def is_import_machinery_frame(name: str, module: str = "") -> bool:
    """A frame of CPython's import system (`_find_and_load (<frozen importlib._bootstrap>)`)."""
    return python_file(name, module) in _IMPORT_FILES


# A bounded memo of a pure function of the frame's strings (no state kept per trace).
@lru_cache(maxsize=65536)
def is_runner_frame(name: str, module: str = "") -> bool:
    """A frame of `python -m`'s runner (`_run_module_as_main (<frozen runpy>)`)."""
    return python_file(name, module) in _RUNNER_FILES


# xpu-perf's own Python in the target: the startup hook's wrappers around a thread's and a
# multiprocessing child's first function (they report names, then call it), outermost in
# every stack of those threads.  By path where the module is known, else by qualname.
_HOOK_FILE = "startup_hook/sitecustomize.py"
_HOOK_FUNCTIONS = re.compile(
    r"^(_wrap_start\.<locals>\.start_reporting\.<locals>\.bootstrap"
    r"|_patch_bootstrap\.<locals>\._bootstrap) \(sitecustomize\.py:\d+\)$"
)


def is_recorder_frame(name: str, module: str = "") -> bool:
    """A frame of xpu-perf's startup hook in the recorded program."""
    if module:
        return module.endswith(_HOOK_FILE)
    return bool(_HOOK_FUNCTIONS.match(name))


def is_interpreter_module(module: str) -> bool:
    return bool(module) and bool(_INTERPRETER_MODULE.match(basename(module)))


# A bounded memo of a pure function of the frame's strings (no state kept per trace).
@lru_cache(maxsize=65536)
def is_interpreter_frame(name: str, module: str = "") -> bool:
    """A frame of CPython itself (not of the Python code it runs, nor of an extension):
    its module is the interpreter's, or, without a module, its name is one of CPython's
    (or its unnamed address is inside python3.X / libpython)."""
    if module:
        return is_interpreter_module(module)
    address = _ADDRESS.match(name)
    if address:
        return is_interpreter_module(address.group("module"))
    return bool(_INTERPRETER_NAME.match(name))


def is_c_runtime_entry(name: str, module: str = "") -> bool:
    """A frame of the C runtime's entry into the program or a thread (libc, the loader)."""
    if module:
        return bool(_C_RUNTIME_MODULE.match(basename(module)))
    address = _ADDRESS.match(name)
    if address:
        return bool(_C_RUNTIME_MODULE.match(address.group("module")))
    return bool(_C_RUNTIME_NAME.match(name))


def is_unnamed_address(name: str, module: str) -> bool:
    """`libfoo.so+0x1234`: a pc the symbolizer could not name inside `module`."""
    return name.startswith(basename(module) + "+0x")


# The CUDA libraries' own objects: their internal symbols carry no cuda prefix.
_CUDA_MODULE = re.compile(r"^lib(cuda|cudart|cublas\w*|cudnn\w*|nccl|cupti|nvrtc)[\w.+-]*\.so")


def is_cuda_library_frame(name: str, module: str = "") -> bool:
    """A frame of the CUDA libraries: by its name, or where known by its module."""
    return bool(_CUDA.match(name)) or bool(module and _CUDA_MODULE.match(basename(module)))


def is_dispatch_frame(name: str) -> bool:
    return bool(_DISPATCH.match(name))


# -- filters ---------------------------------------------------------------------------
FrameRef = tuple[str, str]  # (function name, module path or "")
StackFilter = Callable[[Sequence[FrameRef]], list[FrameRef]]


def hide_interpreter_between_python(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """CPython's own frames between two Python frames go (`<module> (a.py:4);
    PyImport_ImportModuleLevelObject;...;_find_and_load (<frozen ...>)` reads
    `<module> (a.py:4);_find_and_load (...)`): they only say that Python called Python, the
    way py-spy's native mode reads.  Native frames below the innermost Python frame (the C
    code that runs there) stay, and so does every frame that is not the interpreter's (an
    extension's C++ between two Python frames is real work)."""
    python_at = [i for i, (name, module) in enumerate(stack) if is_python_frame(name, module)]
    if len(python_at) < 2:
        return list(stack)
    first, last = python_at[0], python_at[-1]
    return [
        frame
        for i, frame in enumerate(stack)
        if not (first < i < last and is_interpreter_frame(*frame) and not is_python_frame(*frame))
    ]


def hide_startup_above_python(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """In a stack with Python frames, the way in to the outermost one goes: the C runtime's
    entry (`_start;__libc_start_main`, `clone3;start_thread`), the interpreter's start-up
    (`Py_BytesMain;Py_RunMain;pymain_run_python;...;PyEval_EvalCode`, a thread's
    `thread_run`) and `python -m`'s runner (`_run_module_as_main;_run_code`).  They are in
    every sample of the process, so they only push the program down the flamegraph and to
    the top of a ranking by total.  The thread root stays, and so does the frame of an
    embedding program (its own code calling into Python).  Without Python frames, the C
    runtime's frames right under the root go (`_without_thread_entry`)."""
    first = next(
        (
            i
            for i, (name, module) in enumerate(stack)
            if is_python_frame(name, module) and not is_runner_frame(name, module)
        ),
        None,
    )
    if first is None:
        return _without_thread_entry(stack)
    return [
        frame
        for i, frame in enumerate(stack)
        if i == 0
        or i >= first
        or not (
            is_interpreter_frame(*frame) or is_c_runtime_entry(*frame) or is_runner_frame(*frame)
        )
    ]


def _without_thread_entry(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """A stack without Python frames loses the C runtime's frames right under its root
    (`clone3;start_thread` of a native thread such as PyTorch's autograd or an OpenBLAS
    worker, often unnamed `libc.so.6+0x...`): they are in every sample of that thread.  A
    stack of nothing else keeps them (the time is theirs)."""
    end = 1
    while end < len(stack) and is_c_runtime_entry(*stack[end]):
        end += 1
    if end >= len(stack):
        return list(stack)
    return [stack[0], *stack[end:]]


def collapse_import_machinery(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """Each run of the import system's frames reads as its outermost one (`<module> (a.py:3);
    _find_and_load (<frozen importlib._bootstrap>:1360);<module> (b.py:1)`: a.py imports b),
    as tracebacks leave them out: five frames per nested import made import-heavy stacks
    three times as deep as the code they run.  Time spent in the import system itself (finding,
    reading, unmarshalling) stays on the kept frame."""
    out: list[FrameRef] = []
    for frame in stack:
        if out and is_import_machinery_frame(*frame) and is_import_machinery_frame(*out[-1]):
            continue
        out.append(frame)
    return out


def hide_recorder_frames(stack: Sequence[FrameRef]) -> list[FrameRef]:
    """xpu-perf's own frames in the program (the startup hook that reports thread and
    process names wraps each thread's first function): not the program's code."""
    return [frame for i, frame in enumerate(stack) if i == 0 or not is_recorder_frame(*frame)]


DEFAULT_FILTERS: tuple[StackFilter, ...] = (
    hide_recorder_frames,
    hide_startup_above_python,
    hide_interpreter_between_python,
    collapse_import_machinery,
)


def apply_filters(stack: Sequence[FrameRef], show_all: bool = False) -> list[FrameRef]:
    """A stack as users read it by default; every frame with show_all."""
    out = list(stack)
    if show_all:
        return out
    for stack_filter in DEFAULT_FILTERS:
        out = stack_filter(out)
    return out
