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

Each file has its own header with only what it offers: b.c's functions and variables are used
through b.h, and b.h declares nothing another .c file defines (a header gathering several
files' entry points fails), and every header of cupti_inject/src is some b.c's b.h.
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
    """One compiled .c file: the global symbols it defines and needs, where the declaration
    of each needed symbol came from, and what of the library its headers declare."""

    name: str
    defines: set[str] = field(default_factory=set)
    needs: set[str] = field(default_factory=set)
    declared_in: dict[str, str] = field(default_factory=dict)
    # (symbol, header, the file that defines the symbol) for each symbol of the library a
    # header this file includes mentions at file scope.
    header_mentions: set[tuple[str, str, str]] = field(default_factory=set)


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


_TAG_KEYWORDS = frozenset({"struct", "union", "enum"})
_LINE_MARKER = re.compile(r'^# \d+ "([^"]+)"(.*)$')


def _header_mentions(
    cc: str, flags: list[str], source: Path, symbols: Iterable[str]
) -> list[tuple[str, str]]:
    """(symbol, header's path) for each file-scope mention of one of the symbols in a
    header's text, in order, as the preprocessor saw the source (text inside braces, struct
    fields and inline bodies, is not a declaration, nor a struct, union or enum tag; a file a
    header includes that is not a header itself, the stream's .def, counts as that header's
    text; a header included through another names the innermost one)."""
    text = subprocess.run(
        [cc, *flags, "-E", str(source)], capture_output=True, text=True, check=True
    ).stdout
    wanted = set(symbols)
    found: list[tuple[str, str]] = []
    word = re.compile(r"[A-Za-z_]\w*|[{}]")
    files = [str(source)]  # the include stack, innermost last
    depth = 0
    previous = ""  # `struct xp_window_control` names a type, not the variable
    for line in text.splitlines():
        m = _LINE_MARKER.match(line)
        if m:
            name, flags_ = m.group(1), m.group(2).split()
            if "1" in flags_:
                files.append(name)
            elif "2" in flags_:
                while len(files) > 1 and files[-1] != name:
                    files.pop()
            else:
                files[-1] = name
            continue
        headers = [f for f in files if f.endswith(".h")]
        if Path(files[-1]).name == source.name or not headers:
            continue  # a declaration in the file itself is not a header's
        for token in word.findall(line):
            if token == "{":
                depth += 1
            elif token == "}":
                depth -= 1
            elif depth == 0 and token in wanted and previous not in _TAG_KEYWORDS:
                found.append((token, headers[-1]))
            previous = token
    return found


def _compile(cc: str, nm: str, flags: list[str], source_dir: Path, name: str, tmp: Path) -> Unit:
    source = source_dir / name
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


def library_graph(
    sources: Iterable[str], defines: Iterable[str], source_dir: Path = SOURCE_DIR
) -> Graph:
    """The use graph among the given sources (files of source_dir), compiled as their library
    is."""
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
            u.name: u
            for u in pool.map(lambda n: _compile(cc, nm, flags, source_dir, n, Path(tmp)), names)
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
        # Every mention of a symbol of the library in a header the file includes: what the
        # file uses is declared by the first; each names its header's owner.
        mentions = [
            (symbol, Path(path).name, Path(path).resolve().parent == source_dir.resolve())
            for symbol, path in _header_mentions(cc, flags, source_dir / unit.name, owner)
        ]
        # A file may define what a header of another project declares (CUPTI's
        # InitializeInjection, NVTX's init table): only the library's own headers are held
        # to the rule.
        unit.header_mentions = {
            (symbol, header, owner[symbol]) for symbol, header, own in mentions if own
        }
        used = {s for syms in edges[unit.name].values() for s in syms}
        for symbol, header, _ in mentions:
            if symbol in used:
                unit.declared_in.setdefault(symbol, header)
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


def test_every_header_is_a_files_own() -> None:
    """b.h is b.c's: a header without its file would gather other files' declarations."""
    orphans = sorted(
        p.name for p in SOURCE_DIR.glob("*.h") if not (SOURCE_DIR / f"{p.stem}.c").exists()
    )
    assert not orphans, f"headers of no .c file of cupti_inject/src: {orphans}"


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


def foreign_declarations(graph: Graph) -> list[str]:
    """Each header that declares a function or variable another .c file defines (b.h
    declaring what a.c defines), with the file that includes it: a header offers only what
    its own .c file defines."""
    return sorted(
        {
            f"{header} declares {symbol}, defined in {owner} (seen through {name})"
            for name, unit in graph.units.items()
            for symbol, header, owner in unit.header_mentions
            if header != own_header(owner)
        }
    )


@pytest.mark.parametrize("library", sorted(LIBRARIES))
def test_each_header_declares_only_its_own_file(graphs: dict[str, Graph], library: str) -> None:
    wrong = foreign_declarations(graphs[library])
    assert not wrong, f"{library} library:\n" + "\n".join(wrong)


def test_the_check_finds_a_foreign_declaration(tmp_path: Path) -> None:
    """On files known by construction: b.h declares a_helper, which a.c defines, though no
    other file uses it (the use check alone would pass)."""
    (tmp_path / "a.h").write_text("int a_fn(void);\n")
    (tmp_path / "a.c").write_text(
        '#include "a.h"\n#include "b.h"\n'
        "int a_fn(void) { return b_fn(); }\nint a_helper(void) { return 2; }\n"
    )
    (tmp_path / "b.h").write_text("int b_fn(void);\nint a_helper(void);\nstruct s { int a_fn; };\n")
    (tmp_path / "b.c").write_text('#include "b.h"\nint b_fn(void) { return 1; }\n')
    graph = library_graph(["a.c", "b.c"], (f"-I{tmp_path}",), tmp_path)
    assert graph.edges == {"a.c": {"b.c": {"b_fn"}}, "b.c": {}}
    assert foreign_declarations(graph) == [
        "b.h declares a_helper, defined in a.c (seen through a.c)",
        "b.h declares a_helper, defined in a.c (seen through b.c)",
    ]
    (tmp_path / "b.h").write_text("int b_fn(void);\nstruct s { int a_fn; };\n")
    (tmp_path / "a.h").write_text("int a_fn(void);\nint a_helper(void);\n")
    assert foreign_declarations(library_graph(["a.c", "b.c"], (), tmp_path)) == []
