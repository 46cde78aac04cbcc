"""No module keeps state keyed by traces or paths (issue 36, item 4): what the analyses
derive from a trace lives in that trace's analysis session (exporters/analysis/session.py),
not in a module's dict.

The tree is read with `ast`: a module-level name bound to an empty container (to be filled
later), a `global` statement, or an unbounded functools cache is module state; each kept
one is listed in ALLOWED with why it is not a cache keyed by a trace or a path.  Bounded
memos of pure functions of strings (`lru_cache(maxsize=N)`) are allowed as they are."""

from __future__ import annotations

import ast
import gc
import weakref
from pathlib import Path

from exporters.analysis.analyze import load_for_query
from exporters.analysis.busy import gpu_busy
from exporters.analysis.session import AnalysisSession, session_of
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from .test_kernel_overlap import _ops

ROOT = Path(__file__).resolve().parent.parent
_CONTAINERS = {
    "dict",
    "set",
    "list",
    "defaultdict",
    "OrderedDict",
    "Counter",
    "deque",
    "WeakKeyDictionary",
    "WeakValueDictionary",
    "WeakSet",
}
ALLOWED: dict[tuple[str, str], str] = {
    ("collector/sources/kineto_events.py", "_JSON_TEXTS"): (
        "a memo of json_text, a pure function of the value, cleared past 65,536 entries"
    ),
    ("collector/recording/libraries.py", "_run_directory"): (
        "the one directory of this run's library copies, removed at exit: no key"
    ),
    ("collector/cache_trust.py", "_run_cache"): (
        "functools.cache of a function without arguments: this process's one private dir"
    ),
    ("collector/files.py", "_REMOVED_AT_EXIT"): (
        "this process's own run directories, removed by one atexit callback: no cache"
    ),
    ("exporters/perfetto/engine/sql_modules.py", "library"): (
        "functools.cache of a function without arguments: the installed code's SQL modules, "
        "parsed once (what each trace loaded is recorded on the trace)"
    ),
}


def _module_state(path: Path) -> list[tuple[str, int]]:
    """(name, line) of each piece of module state in one file."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = node.value
            empty = (isinstance(value, ast.Dict) and not value.keys) or (
                isinstance(value, (ast.List, ast.Set)) and not value.elts
            )
            if isinstance(value, ast.Call):
                func = value.func
                called = getattr(func, "id", None) or getattr(func, "attr", None)
                empty = called in _CONTAINERS
            if empty:
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                found += [(ast.unparse(t), node.lineno) for t in targets]
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found += [(name, node.lineno) for name in node.names]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                text = ast.unparse(decorator)
                unbounded = text.endswith(("functools.cache", "cache")) or (
                    "lru_cache" in text and "maxsize=None" in text
                )
                if unbounded:
                    found.append((node.name, node.lineno))
    return found


def test_no_module_state_but_the_allowed() -> None:
    seen = set()
    unexpected = []
    for package in ("collector", "exporters"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            for name, line in _module_state(path):
                if (rel, name) in ALLOWED:
                    seen.add((rel, name))
                else:
                    unexpected.append(f"{rel}:{line} {name}")
    assert unexpected == [], "module state (keep it on an object the caller holds)"
    assert seen == set(ALLOWED), "ALLOWED lists state that is gone: remove it there"


def test_the_scan_finds_module_state(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "import functools, weakref\n"
        "_A = {}\n"
        "_B: dict[str, int] = {}\n"
        "_C = weakref.WeakKeyDictionary()\n"
        "_TABLE = {'x': 1}\n"
        "_N = None\n"
        "def f():\n"
        "    global _N\n"
        "    local = {}\n"
        "@functools.cache\n"
        "def g(x): return x\n"
        "@functools.lru_cache(maxsize=64)\n"
        "def h(x): return x\n"
    )
    assert sorted(name for name, _ in _module_state(source)) == ["_A", "_B", "_C", "_N", "g"]


def test_gpu_busy_lives_in_the_trace_session(tmp_path: Path) -> None:
    """The busy islands are computed once per opened trace and kept on it: the same object
    on a second ask, another for the same file opened again, gone with the trace."""
    path = tmp_path / "ops.perfetto-trace"
    with TraceWriter(path) as writer:
        writer.producer("cupti").write_all(batched(_ops(1)))
    with open_trace(path) as first, open_trace(path) as second:
        assert first.analysis_session is None
        load_for_query(first)
        load_for_query(second)
        session = first.analysis_session
        assert isinstance(session, AnalysisSession) and session is session_of(first)
        busy = gpu_busy(first)
        assert busy is session.gpu_busy is gpu_busy(first)
        assert busy.ops.ts.size > 0
        other = gpu_busy(second)
        assert other is not busy and second.analysis_session is not session
        assert other.all_islands.ts.tolist() == busy.all_islands.ts.tolist()
        gone = weakref.ref(busy)
    del first, session, busy
    gc.collect()
    assert gone() is None
