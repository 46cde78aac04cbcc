"""The C sources of cupti_inject/src form a stack: no call cycle among the .c files.

The graph comes from a real build: each .c file is compiled to an object with the project's
flags (collector/inject_build.py), `nm` lists the global symbols it defines and the ones it
needs, and each needed symbol is mapped to the file of the same library that defines it.  An
edge A -> B means A calls a function (or reads a variable) that B defines.  Both libraries are
covered (the injection library with its experiments variant, the CPU sampler library), and
every .c file on disk must be in one of them.

The test prints, per file, each file it uses, the symbols and the header each symbol's
declaration comes from (as the preprocessor saw it: a header included through another names
the innermost one), and, on failure, one cycle per strongly connected set of files.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from collector import inject_build
from collector.inject_build import (
    CFLAGS,
    CUPTI_SOURCES,
    EXPERIMENT_SOURCES,
    EXPERIMENTS_DEFINE,
    SAMPLER_SOURCES,
    SOURCE_DIR,
    BuildError,
)

# The libraries and the sources each is linked from; an experiments build has every call the
# product build has, and the selftime ones.
LIBRARIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "injection": ((*CUPTI_SOURCES, *EXPERIMENT_SOURCES), (EXPERIMENTS_DEFINE,)),
    "sampler": (SAMPLER_SOURCES, ()),
}


@dataclass
class Unit:
    """One compiled .c file: the global symbols it defines and needs, and where the
    declaration of each needed symbol came from."""

    name: str
    defines: set[str] = field(default_factory=set)
    needs: set[str] = field(default_factory=set)
    declared_in: dict[str, str] = field(default_factory=dict)


@dataclass
class Graph:
    """Edges A -> B with the symbols of B that A uses."""

    edges: dict[str, dict[str, set[str]]]
    units: dict[str, Unit]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} not on PATH")
    return path


def _global_symbols(nm: str, obj: Path, which: str) -> set[str]:
    out = subprocess.run([nm, "-g", which, str(obj)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


_LINE_MARKER = re.compile(r'^# \d+ "([^"]+)"(.*)$')


def _declarations(
    cc: str, flags: list[str], source: Path, symbols: Iterable[str]
) -> dict[str, str]:
    """For each symbol, the header whose file-scope text declares it, as the preprocessor saw
    the source (text inside braces, struct fields and inline bodies, is not a declaration; a
    file a header includes that is not a header itself, the stream's .def, counts as that
    header's text)."""
    text = subprocess.run(
        [cc, *flags, "-E", str(source)], capture_output=True, text=True, check=True
    ).stdout
    wanted = set(symbols)
    found: dict[str, str] = {}
    word = re.compile(r"[A-Za-z_]\w*|[{}]")
    files = [source.name]  # the include stack, innermost last
    depth = 0
    for line in text.splitlines():
        m = _LINE_MARKER.match(line)
        if m:
            name, flags_ = Path(m.group(1)).name, m.group(2).split()
            if "1" in flags_:
                files.append(name)
            elif "2" in flags_:
                while len(files) > 1 and files[-1] != name:
                    files.pop()
            else:
                files[-1] = name
            continue
        headers = [f for f in files if f.endswith(".h")]
        if files[-1] == source.name or not headers:
            continue  # a declaration in the file itself is not a header's
        for token in word.findall(line):
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
            elif depth == 0 and token in wanted and token not in found:
                found[token] = headers[-1]
    return found


def _compile(cc: str, nm: str, flags: list[str], name: str, tmp: Path) -> Unit:
    source = SOURCE_DIR / name
    obj = tmp / f"{name}.o"
    proc = subprocess.run(
        [cc, *flags, "-c", "-o", str(obj), str(source)], capture_output=True, text=True
    )
    assert proc.returncode == 0, f"{name} does not compile:\n{proc.stderr}"
    return Unit(name, _global_symbols(nm, obj, "--defined-only"), _global_symbols(nm, obj, "-u"))


def _libc_symbols(nm: str) -> set[str]:
    """The functions the C library exports (its dynamic symbols, versions dropped)."""
    import ctypes.util

    name = ctypes.util.find_library("c") or "libc.so.6"
    path = next(
        (
            Path(d) / name
            for d in ("/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib64", "/lib64")
            if (Path(d) / name).exists()
        ),
        None,
    )
    if path is None:
        pytest.skip("no libc.so.6 to read")
    out = subprocess.run(
        [nm, "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True
    ).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


def library_graph(sources: Iterable[str], defines: Iterable[str]) -> Graph:
    """The use graph among the given sources, compiled as their library is."""
    try:
        cupti = inject_build.find_cupti()
    except BuildError as exc:
        pytest.skip(f"no CUPTI headers: {exc}")
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    nm = _tool("nm")
    flags = [*(f for f in CFLAGS if f != "-shared"), *defines, *inject_build.include_flags(cupti)]
    names = sorted(set(sources))
    with (
        tempfile.TemporaryDirectory(prefix="xpu-perf-c-layers-") as tmp,
        ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool,
    ):
        units = {
            u.name: u for u in pool.map(lambda n: _compile(cc, nm, flags, n, Path(tmp)), names)
        }
    # A libc function a file defines is an interposition (waits.c times the blocking calls
    # the program makes): every caller of pthread_mutex_lock is not a user of that file.
    libc = _libc_symbols(nm)
    owner: dict[str, str] = {}
    for unit in units.values():
        for symbol in unit.defines - libc:
            other = owner.setdefault(symbol, unit.name)
            assert other == unit.name, f"{symbol} is defined by both {other} and {unit.name}"
    edges: dict[str, dict[str, set[str]]] = {name: {} for name in names}
    for unit in units.values():
        for symbol in unit.needs:
            to = owner.get(symbol)
            if to is not None and to != unit.name:
                edges[unit.name].setdefault(to, set()).add(symbol)
    for unit in units.values():
        used = {s for syms in edges[unit.name].values() for s in syms}
        unit.declared_in = _declarations(cc, flags, SOURCE_DIR / unit.name, used)
    return Graph(edges, units)


def strongly_connected(edges: dict[str, dict[str, set[str]]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one file, each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def a_cycle(edges: dict[str, dict[str, set[str]]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first file, inside the component."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges[v]):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if w not in parents:
                    parents[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def describe(graph: Graph) -> str:
    """Per file: the files it uses, with each symbol and the header that declares it."""
    lines = []
    for name in sorted(graph.edges):
        unit = graph.units[name]
        for to in sorted(graph.edges[name]):
            for symbol in sorted(graph.edges[name][to]):
                header = unit.declared_in.get(symbol, "(no header: declared in the file itself)")
                lines.append(f"  {name} -> {to}: {symbol}  [{header}]")
    return "\n".join(lines)


def _cycle_report(graph: Graph, components: list[list[str]]) -> str:
    out = []
    for component in components:
        cycle = a_cycle(graph.edges, component)
        steps = [
            f"{a} -> {b} ({', '.join(sorted(graph.edges[a][b])[:3])})"
            for a, b in itertools.pairwise(cycle)
        ]
        out.append(
            f"{len(component)} files in a cycle: {' '.join(component)}\n  e.g. "
            + "\n       ".join(steps)
        )
    return "\n".join(out)


@pytest.fixture(scope="module")
def graphs() -> dict[str, Graph]:
    return {lib: library_graph(sources, defines) for lib, (sources, defines) in LIBRARIES.items()}


def test_every_source_is_checked() -> None:
    checked = {name for sources, _ in LIBRARIES.values() for name in sources}
    on_disk = {p.name for p in SOURCE_DIR.glob("*.c")}
    assert on_disk <= checked, f"not in any library, so not checked: {sorted(on_disk - checked)}"


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_no_call_cycle_among_files(graphs: dict[str, Graph], library: str) -> None:
    graph = graphs[library]
    print(f"\n{library} library: who uses whom, and through which header\n{describe(graph)}")
    components = strongly_connected(graph.edges)
    assert not components, f"{library} library: call cycles among .c files\n" + _cycle_report(
        graph, components
    )


def test_the_check_finds_a_cycle() -> None:
    """The cycle finder itself, on a graph known by construction."""
    edges: dict[str, dict[str, set[str]]] = {
        "a.c": {"b.c": {"f"}},
        "b.c": {"c.c": {"g"}},
        "c.c": {"a.c": {"h"}, "d.c": {"i"}},
        "d.c": {},
    }
    assert strongly_connected(edges) == [["a.c", "b.c", "c.c"]]
    assert a_cycle(edges, ["a.c", "b.c", "c.c"]) == ["a.c", "b.c", "c.c", "a.c"]
    del edges["c.c"]["a.c"]
    assert strongly_connected(edges) == []


def own_header(source: str) -> str:
    return source.removesuffix(".c") + ".h"


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_each_file_is_used_through_its_own_header(graphs: dict[str, Graph], library: str) -> None:
    """A file's functions and variables that other files use are declared in its own header
    (b.c's in b.h), not in a header that gathers everyone's."""
    graph = graphs[library]
    wrong = [
        f"{name} uses {symbol} of {to} through {graph.units[name].declared_in.get(symbol)}"
        for name, uses in graph.edges.items()
        for to, symbols in uses.items()
        for symbol in sorted(symbols)
        if graph.units[name].declared_in.get(symbol) != own_header(to)
    ]
    assert not wrong, "\n".join(wrong)
