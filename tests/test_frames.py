"""Frame predicates and display filters (collector/frames.py, exporters/folded/frames.py):
literal stacks as the samplers write them, and one contract every filter keeps."""

from __future__ import annotations

import pytest

from collector import frames as predicates
from collector.frames import (
    DEFAULT_FILTERS,
    FrameRef,
    StackFilter,
    apply_filters,
    collapse_import_machinery,
    hide_interpreter_between_python,
    hide_startup_above_python,
)
from exporters.folded.frames import filter_folded

PY = "/usr/bin/python3.11"
LIBPY = "/usr/lib/x86_64-linux-gnu/libpython3.13.so.1.0"
TORCH = "/venv/lib/python3.11/site-packages/torch/lib/libtorch_python.so"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"

# `import transformers` inside a script, as the in-process sampler names it (Debian's
# python3.11: the interpreter statically linked into the executable).
IMPORT_STACK: list[FrameRef] = [
    ("main-thread", ""),
    ("_start", PY),
    ("__libc_start_main", LIBC),
    ("Py_BytesMain", PY),
    ("<module> (wl_hf.py:4)", "/work/wl_hf.py"),
    ("PyImport_ImportModuleLevelObject", PY),
    ("PyObject_CallMethodObjArgs", PY),
    ("_find_and_load (<frozen importlib._bootstrap>:1176)", "<frozen importlib._bootstrap>"),
    (
        "_call_with_frames_removed (<frozen importlib._bootstrap>:241)",
        "<frozen importlib._bootstrap>",
    ),
    ("builtin_exec", PY),
    ("PyEval_EvalCode", PY),
    ("<module> (modeling.py:1)", "/venv/transformers/modeling.py"),
    ("python3.11+0x1bc2a0", PY),
    ("compile (re.py:250)", "/usr/lib/python3.11/re.py"),
    ("_PyEval_EvalFrameDefault", PY),
    ("sre_compile", PY),
    ("memcpy", LIBC),
]

# A PyTorch op: Python calls into libtorch_python (real work between Python frames), which
# calls back into Python through the interpreter, then a native leaf.
TORCH_STACK: list[FrameRef] = [
    ("MainThread", ""),
    ("train (train.py:40)", "/work/train.py"),
    ("cfunction_call", LIBPY),
    ("THPVariable_backward", TORCH),
    ("_PyFunction_Vectorcall", LIBPY),
    ("hook (train.py:12)", "/work/train.py"),
    ("method_vectorcall_FASTCALL", LIBPY),
    ("THPVariable_add", TORCH),
    ("at::native::add", TORCH),
]

# `python -m pkg.train` importing a package that imports a module: the runner above the
# program, the import system five frames deep per import, as CPython 3.12 runs it.
BOOT = "<frozen importlib._bootstrap>"
BOOT_EXT = "<frozen importlib._bootstrap_external>"
RUNPY = "<frozen runpy>"
IMPORT_CHAIN = [
    (f"_find_and_load ({BOOT}:1360)", BOOT),
    (f"_find_and_load_unlocked ({BOOT}:1331)", BOOT),
    (f"_load_unlocked ({BOOT}:935)", BOOT),
    (f"_LoaderBasics.exec_module ({BOOT_EXT}:995)", BOOT_EXT),
    (f"_call_with_frames_removed ({BOOT}:488)", BOOT),
]
MODULE_RUN_STACK: list[FrameRef] = [
    ("MainThread", ""),
    (f"_run_module_as_main ({RUNPY}:198)", RUNPY),
    (f"_run_code ({RUNPY}:88)", RUNPY),
    ("<module> (train.py:3)", "/work/pkg/train.py"),
    *IMPORT_CHAIN,
    ("<module> (__init__.py:1)", "/venv/lib/transformers/__init__.py"),
    *IMPORT_CHAIN,
    ("<module> (modeling.py:9)", "/venv/lib/transformers/modeling.py"),
    *IMPORT_CHAIN[:2],
    (f"_find_spec ({BOOT}:1240)", BOOT),  # the import system at work: its time stays
]

NATIVE_ONLY: list[FrameRef] = [("worker", ""), ("start_thread", LIBC), ("run", "/bin/app")]
# A threading.Thread of a recorded program: the startup hook's wrapper (it reports the
# thread's name) between threading's bootstrap and the thread's run.
HOOK = "/tmp/xpu-perf-0/run/startup_hook/sitecustomize.py"
THREAD_STACK: list[FrameRef] = [
    ("metrics", ""),
    ("clone3", LIBC),
    ("start_thread", LIBC),
    ("thread_run", PY),
    ("_wrap_start.<locals>.start_reporting.<locals>.bootstrap (sitecustomize.py:192)", HOOK),
    ("Thread._bootstrap (threading.py:1032)", "/usr/lib/python3.12/threading.py"),
    ("Thread.run (threading.py:1012)", "/usr/lib/python3.12/threading.py"),
    ("metrics_loop (train.py:16)", "/work/train.py"),
]
ALL_STACKS = [
    IMPORT_STACK,
    TORCH_STACK,
    MODULE_RUN_STACK,
    THREAD_STACK,
    NATIVE_ONLY,
    [("t", "")],
    [],
]


def names(stack: list[FrameRef]) -> list[str]:
    return [name for name, _ in stack]


def test_startup_above_python_goes() -> None:
    assert names(hide_startup_above_python(IMPORT_STACK))[:3] == [
        "main-thread",
        "<module> (wl_hf.py:4)",
        "PyImport_ImportModuleLevelObject",
    ]
    embedded = [("t", ""), ("_start", "/bin/server"), ("serve", "/bin/server"), *IMPORT_STACK[3:]]
    assert names(hide_startup_above_python(embedded))[:3] == ["t", "_start", "serve"]
    # No Python: the thread's entry in the C runtime goes, by module or by name (the
    # eBPF sampler's unnamed libc addresses too); a program's own _start stays.
    assert names(hide_startup_above_python(NATIVE_ONLY)) == ["worker", "run"]
    autograd = [
        ("pt_autograd_0", ""),
        ("libc.so.6+0x129ecc", ""),
        ("libc.so.6+0x9cb84", ""),
        ("torch::autograd::Engine::thread_main", "/venv/torch/lib/libtorch_cpu.so"),
    ]
    assert names(hide_startup_above_python(autograd)) == [
        "pt_autograd_0",
        "torch::autograd::Engine::thread_main",
    ]
    program = [
        ("main", ""),
        ("_start", "/bin/app"),
        ("__libc_start_main", LIBC),
        ("main", "/bin/app"),
    ]
    assert hide_startup_above_python(program) == program
    only_libc = [("t", ""), ("clone3", LIBC), ("start_thread", LIBC)]
    assert hide_startup_above_python(only_libc) == only_libc  # nothing else: their time


def test_interpreter_frames_between_python_frames_go() -> None:
    assert names(hide_interpreter_between_python(IMPORT_STACK)) == [
        "main-thread",
        "_start",
        "__libc_start_main",
        "Py_BytesMain",  # above the outermost Python frame: start-up, kept
        "<module> (wl_hf.py:4)",
        "_find_and_load (<frozen importlib._bootstrap>:1176)",
        "_call_with_frames_removed (<frozen importlib._bootstrap>:241)",
        "<module> (modeling.py:1)",
        "compile (re.py:250)",
        "_PyEval_EvalFrameDefault",  # below the innermost Python frame: C that runs there
        "sre_compile",
        "memcpy",
    ]


def test_extension_frames_between_python_frames_stay() -> None:
    assert names(hide_interpreter_between_python(TORCH_STACK)) == [
        "MainThread",
        "train (train.py:40)",
        "THPVariable_backward",
        "hook (train.py:12)",
        "method_vectorcall_FASTCALL",  # below the innermost Python frame: kept
        "THPVariable_add",
        "at::native::add",
    ]


def test_import_machinery_reads_as_one_frame_per_import() -> None:
    assert names(apply_filters(MODULE_RUN_STACK)) == [
        "MainThread",  # python -m's runner above the program goes, as start-up does
        "<module> (train.py:3)",
        f"_find_and_load ({BOOT}:1360)",
        "<module> (__init__.py:1)",
        f"_find_and_load ({BOOT}:1360)",
        "<module> (modeling.py:9)",
        f"_find_and_load ({BOOT}:1360)",  # the import system's own time, on one frame
    ]
    # By name alone (a folded file): the same.
    by_name = [(name, "") for name, _ in MODULE_RUN_STACK]
    assert names(apply_filters(by_name)) == names(apply_filters(MODULE_RUN_STACK))
    # The runner is hidden only above the program; a lone runner stack stays as it is.
    runner_only = MODULE_RUN_STACK[:3]
    assert apply_filters(runner_only) == runner_only
    assert (
        names(collapse_import_machinery(IMPORT_STACK)).count(
            f"_call_with_frames_removed ({BOOT}:241)"
        )
        == 0
    )
    assert apply_filters(MODULE_RUN_STACK, show_all=True) == MODULE_RUN_STACK


def test_the_recorders_own_frames_go() -> None:
    shown = [
        "metrics",
        "Thread._bootstrap (threading.py:1032)",
        "Thread.run (threading.py:1012)",
        "metrics_loop (train.py:16)",
    ]
    assert names(apply_filters(THREAD_STACK)) == shown
    by_name = [(name, "") for name, _ in THREAD_STACK]
    assert names(apply_filters(by_name)) == shown
    # A program's own sitecustomize is the program's.
    own = [("t", ""), ("main (sitecustomize.py:3)", "/usr/lib/python3/sitecustomize.py")]
    assert apply_filters(own) == own


def test_by_module_first_then_by_name() -> None:
    # A PyObject_* symbol of another object is that object's (numpy, pybind11 shims).
    assert not predicates.is_interpreter_frame("PyObject_Call", TORCH)
    assert predicates.is_interpreter_frame("some_static_function", LIBPY)
    assert predicates.is_interpreter_frame("x", "/opt/python/bin/python3.13d")
    # Without a module (folded files, old traces): CPython's API families by name.
    for name in (
        "PyObject_Vectorcall",
        "_PyEval_EvalFrameDefault",
        "method_vectorcall_O",
        "PyImport_ImportModuleLevelObject",
        "cfunction_call",
        "python3.12+0x6bcf22",
    ):
        assert predicates.is_interpreter_frame(name), name
    for name in ("PyArray_MatrixProduct2", "THPVariable_add", "main", "libtorch.so+0x1f"):
        assert not predicates.is_interpreter_frame(name), name


def test_folded_text_with_and_without_modules() -> None:
    stack = ";".join(names(IMPORT_STACK))
    modules = ";".join(m for _, m in IMPORT_STACK)
    shown = filter_folded(stack, modules)
    assert "PyObject_CallMethodObjArgs" not in shown and shown.endswith(";sre_compile;memcpy")
    assert filter_folded(stack, modules, show_all=True) == stack
    # Names only (modules missing or not lined up): the same frames go by their names.
    assert filter_folded(stack, None) == filter_folded(stack, ";".join(["x"] * 3))
    assert "PyEval_EvalCode" not in filter_folded(stack, None)


@pytest.mark.parametrize("stack_filter", [*DEFAULT_FILTERS, apply_filters])
@pytest.mark.parametrize("stack", ALL_STACKS)
def test_filter_contract(stack_filter: StackFilter, stack: list[FrameRef]) -> None:
    """Every filter: idempotent, never drops a Python frame of the program (only the
    interpreter's own Python machinery: import system, runner), never empties a stack (the
    thread root stays), keeps the native frames below the innermost Python frame, keeps
    the order of what it keeps."""
    out = stack_filter(stack)
    assert stack_filter(out) == out

    def program(frames: list[FrameRef]) -> list[FrameRef]:
        return [
            f
            for f in frames
            if predicates.is_python_frame(*f)
            and not predicates.is_import_machinery_frame(*f)
            and not predicates.is_runner_frame(*f)
            and not predicates.is_recorder_frame(*f)
        ]

    assert program(out) == program(stack)
    python = [f for f in stack if predicates.is_python_frame(*f)]
    assert bool(out) == bool(stack) and (not stack or out[0] == stack[0])
    if python:
        last = max(i for i, f in enumerate(stack) if predicates.is_python_frame(*f))
        assert out[len(out) - (len(stack) - last - 1) :] == stack[last + 1 :]
    it = iter(stack)
    assert all(frame in it for frame in out)  # a subsequence
    assert apply_filters(stack, show_all=True) == stack


def test_launch_stack_text_hides_the_way_in() -> None:
    """The API slice's launch_stack arg (innermost first) reads as folded does: the
    outermost frames of a launch stack (which has no thread root) are start-up too."""
    from collector import model
    from exporters.perfetto.launch_stacks import stack_text

    launch = [*MODULE_RUN_STACK[1:], ("cudaLaunchKernel", "/usr/lib/libcudart.so.13")]
    stack = model.Stack(tuple(model.Frame(name, module) for name, module in launch))
    assert stack_text(stack).split(" <- ") == [
        "cudaLaunchKernel",
        f"_find_and_load ({BOOT}:1360)",
        "<module> (modeling.py:9)",
        f"_find_and_load ({BOOT}:1360)",
        "<module> (__init__.py:1)",
        f"_find_and_load ({BOOT}:1360)",
        "<module> (train.py:3)",
    ]
