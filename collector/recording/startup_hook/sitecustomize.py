"""xpu-perf's startup hook in the recorded program's Python: `record` puts this directory
first on PYTHONPATH, so Python's `site` imports this file at startup.

What it reports, as lines appended to names-PID.tsv in $XPU_PERF_NAMES_DIR (one os.write of
an O_APPEND descriptor per line: lines of concurrent threads never interleave), which record
puts on the tracks (collector/recording/python_names.py):
- `T TID NAME`: a thread started by `threading` reports its name (threading.Thread(name=...),
  or the default `Thread-N (target)`) as it starts, from the new thread itself; it also sets
  the OS thread name (comm, 15 bytes), as CPython 3.14 does by itself (not done again
  there), so that top, ps and the eBPF sampler's comm read it during the run too;
- `P PPID START_NS PROCESS_NAME MODULE:QUALNAME CALLABLE_MODULES`: a multiprocessing process
  (any start method) reports, as its bootstrap begins, its name, its target and the modules
  of the callables among the target's arguments (what record names the process after:
  collector/recording/process_roles.py).  Forked children patch the bootstrap after the fork
  (multiprocessing is loaded already then); spawned ones (`--multiprocessing-fork`) load
  multiprocessing.process at startup, as they would a moment later anyway.
Fields are separated by tabs.

Rules, because this runs inside someone else's program:
- it never raises: every step is wrapped, a failure leaves the program as it was;
- it imports nothing that Python has not loaded at startup already (os, sys, _thread, the
  frozen import machinery): no threading import, no change of import order;
- it chains to the sitecustomize it shadows (the user's, a distribution's), run as Python
  would have run it, its errors reported the same way;
- Python ignores PYTHONPATH under -I and -E, and skips site under -S: no names then.
"""

# ruff: noqa: UP031, SIM105
# %-formatting: any Python 3 parses it (the hook runs in whatever Python the target starts);
# try/except/pass: contextlib is not loaded at startup, and the hook imports nothing new.

import os
import sys

_ENV = "XPU_PERF_NAMES_DIR"
_COMM_BYTES = 15  # TASK_COMM_LEN - 1


def _chain_shadowed_sitecustomize():
    """Run the next `sitecustomize` on sys.path (past this directory) as `sitecustomize`."""
    here = os.path.dirname(os.path.abspath(__file__))
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]
    machinery = sys.modules.get("_frozen_importlib_external")
    bootstrap = sys.modules.get("_frozen_importlib")
    if machinery is None or bootstrap is None:
        return
    spec = machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = bootstrap.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # what site.execsitecustomize says
        if sys.flags.verbose:
            sys.excepthook(*sys.exc_info())
        else:
            sys.stderr.write(
                "Error in sitecustomize; set PYTHONVERBOSE for traceback:\n%s: %s\n"
                % (err.__class__.__name__, err)
            )


def _comm(name):
    """The name cut to what a thread name holds, on a character boundary."""
    raw = name.encode("utf-8", "replace")[:_COMM_BYTES]
    return raw.decode("utf-8", "ignore").encode("utf-8")


def _clean(text):
    return str(text).replace("\t", " ").replace("\n", " ")


def _append(directory, line):
    path = os.path.join(directory, "names-%d.tsv" % os.getpid())
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, line.encode("utf-8", "replace"))
    finally:
        os.close(fd)


def _thread_reporter(directory):
    import _thread

    set_comm = sys.version_info < (3, 14)  # 3.14 names the OS thread itself

    def report(thread):
        name = getattr(thread, "_name", None)  # threading.Thread keeps its name there
        if not isinstance(name, str) or not name:
            return
        tid = _thread.get_native_id()
        _append(directory, "T\t%d\t%s\n" % (tid, _clean(name)))
        if set_comm:
            fd = os.open("/proc/self/task/%d/comm" % tid, os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(fd, _comm(name))
            finally:
                os.close(fd)

    return report


def _unwrapped(function):
    """A functools.partial's function (nested ones too), else the callable itself."""
    for _ in range(8):
        inner = getattr(function, "func", None)
        if inner is None or not callable(inner):
            break
        function = inner
    return function


def _report_process(directory, process):
    import time

    target = getattr(process, "_target", None) or type(process).run
    target = _unwrapped(target)
    qualname = getattr(target, "__qualname__", None) or getattr(target, "__name__", "?")
    modules = []
    arguments = list(getattr(process, "_args", ()) or ())[:32]
    arguments += list((getattr(process, "_kwargs", None) or {}).values())[:32]
    for argument in arguments:
        if callable(argument):
            module = getattr(_unwrapped(argument), "__module__", None)
            if isinstance(module, str) and module not in modules:
                modules.append(module)
    _append(
        directory,
        "P\t%d\t%d\t%s\t%s:%s\t%s\n"
        % (
            os.getppid(),
            time.monotonic_ns(),
            _clean(getattr(process, "_name", "")),
            _clean(getattr(target, "__module__", "")),
            _clean(qualname),
            _clean(",".join(modules)),
        ),
    )


def _patch_bootstrap(directory):
    """Wrap multiprocessing's BaseProcess._bootstrap (once) to report the process first."""
    process_module = sys.modules.get("multiprocessing.process")
    base = getattr(process_module, "BaseProcess", None)
    original = getattr(base, "_bootstrap", None)
    if original is None or getattr(original, "_xpu_perf_names", False):
        return

    def _bootstrap(self, *args, **kwargs):
        try:
            _report_process(directory, self)
        except BaseException:
            pass  # a name is never worth the program's process
        return original(self, *args, **kwargs)

    _bootstrap._xpu_perf_names = True
    base._bootstrap = _bootstrap


def _install_process_names(directory):
    def after_fork_in_child():
        try:
            _patch_bootstrap(directory)
        except BaseException:
            pass

    os.register_at_fork(after_in_child=after_fork_in_child)
    if "--multiprocessing-fork" in (getattr(sys, "argv", None) or ()):
        import multiprocessing.process  # noqa: F401  (spawn_main imports it right after)

        _patch_bootstrap(directory)


def _wrap_start(start, report):
    """`start` (_thread.start_new_thread or 3.13's start_joinable_thread) whose new thread
    first reports the threading.Thread it runs (threading passes its bound _bootstrap)."""

    def start_reporting(function, *args, **kwargs):
        thread = getattr(function, "__self__", None)
        threading = sys.modules.get("threading")
        if threading is None or not isinstance(thread, threading.Thread):
            return start(function, *args, **kwargs)

        def bootstrap(*inner_args, **inner_kwargs):
            try:
                report(thread)
            except BaseException:
                pass  # a name is never worth the program's thread
            return function(*inner_args, **inner_kwargs)

        return start(bootstrap, *args, **kwargs)

    start_reporting.__name__ = getattr(start, "__name__", "start_new_thread")
    start_reporting.__doc__ = getattr(start, "__doc__", None)
    return start_reporting


def _install_thread_names(directory):
    import _thread

    report = _thread_reporter(directory)
    threading = sys.modules.get("threading")  # loaded already by a .pth file: patch it too
    for name, alias in (
        ("start_new_thread", "_start_new_thread"),
        ("start_joinable_thread", "_start_joinable_thread"),
    ):
        start = getattr(_thread, name, None)
        if start is None:
            continue
        wrapped = _wrap_start(start, report)
        setattr(_thread, name, wrapped)
        if name == "start_new_thread" and getattr(_thread, "start_new", None) is start:
            _thread.start_new = wrapped
        if threading is not None and getattr(threading, alias, None) is start:
            setattr(threading, alias, wrapped)


def _main():
    try:
        directory = os.environ.get(_ENV)
        if directory:
            _install_thread_names(directory)
    except BaseException:
        pass
    try:
        if directory:
            _install_process_names(directory)
    except BaseException:
        pass
    try:
        _chain_shadowed_sitecustomize()
    except BaseException:
        pass


_main()
