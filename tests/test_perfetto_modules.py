"""The layout of exporters/perfetto (the encoder) and exporters/perfetto/engine (the reading
engine): modules that a reader can take one at a time.  A module of the engine is named
`engine.<module>` here.

- no import cycle among the package's modules (imports under TYPE_CHECKING and inside
  functions count too: a cycle is one for the reader whatever the interpreter does);
- no module uses another's private (underscore) names: not through `from .x import _y`,
  not as `x._y` on an imported module, and not as an attribute `obj._y` that another
  module of the package defines and this one does not (an object of another module's class
  reached into; a base class outside the package may have private names of its own).
What one module needs of another has a public name.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "exporters.perfetto"
ROOT = Path(__file__).resolve().parent.parent / "exporters/perfetto"
SUBPACKAGES = (PACKAGE, PACKAGE + ".engine")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _modules() -> dict[str, ast.Module]:
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts): ast.parse(p.read_text(), str(p))
        for p in sorted(ROOT.rglob("*.py"))
    }


def _relative(module: str) -> str:
    """exporters.perfetto.engine.views -> engine.views (the key of _modules)."""
    return module[len(PACKAGE) + 1 :]


def _package_imports(tree: ast.Module) -> list[tuple[str, list[str], int]]:
    """(module of this package, names imported from it, line) for every import of one."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .x import y
                base = f"{PACKAGE}.{base}" if base else PACKAGE
            names = [a.name for a in node.names]
            if base in SUBPACKAGES:  # from exporters.perfetto import wire, writer
                prefix = _relative(base) + "." if base != PACKAGE else ""
                out += [(prefix + name, [], node.lineno) for name in names]
            elif base.startswith(PACKAGE + "."):
                out.append((_relative(base), names, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    out.append((_relative(alias.name), [], node.lineno))
    return out


def _defined_private_names(tree: ast.Module) -> set[str]:
    """Private names this module binds: defs, classes, variables, attributes it sets on
    `self`, __slots__ entries."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Store)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("self", "cls")
        ):
            names.add(node.attr)  # its own objects' attributes (not `prod._x = ...`)
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
        ):
            for elt in ast.walk(node.value):
                if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                    names.add(elt.value)
    return {n for n in names if _private(n)}


def test_no_private_names_across_modules() -> None:
    modules = _modules()
    defined = {name: _defined_private_names(tree) for name, tree in modules.items()}
    problems = []
    for name, tree in modules.items():
        package_aliases = set()
        for module, imported, line in _package_imports(tree):
            problems += [f"{name}.py:{line}: imports {module}.{n}" for n in imported if _private(n)]
            if not imported:
                package_aliases.add(module.rsplit(".", 1)[-1])
        foreign = set().union(*(defined[m] for m in modules if m != name)) - defined[name]
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in package_aliases:
                problems.append(f"{name}.py:{node.lineno}: uses {value.id}.{node.attr}")
            elif node.attr in foreign:
                problems.append(
                    f"{name}.py:{node.lineno}: uses .{node.attr}, private to another module"
                )
    assert not problems, "\n".join(problems)


def test_no_import_cycle() -> None:
    modules = _modules()
    graph = {
        name: {m for m, _, _ in _package_imports(tree) if m in modules and m != name}
        for name, tree in modules.items()
    }
    # Depth-first search; a module met again while on the stack closes a cycle.
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "\n".join(cycles)


def test_checks_see_what_they_forbid(tmp_path: Path) -> None:
    """The walkers themselves: a private import, a private attribute of an imported module
    and one of a foreign object are all found."""
    tree = ast.parse(
        "from exporters.perfetto.writer import _Sequence\n"
        "from exporters.perfetto import wire\n"
        "from . import lanes\n"
        "from exporters.perfetto.engine import views\n"
        "def f(prod):\n"
        "    wire._SMALL\n"
        "    lanes._x\n"
        "    prod._seq\n"
        "    prod._latest = 1\n"
        "class A:\n"
        "    def __init__(self):\n"
        "        self._own = 1\n"
    )
    imports = _package_imports(tree)
    assert ("writer", ["_Sequence"], 1) in imports
    assert ("wire", [], 2) in imports and ("lanes", [], 3) in imports
    assert ("engine.views", [], 4) in imports
    assert _defined_private_names(tree) == {"_own"}
    attrs = [n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)]
    assert sorted(attrs) == ["_SMALL", "_latest", "_own", "_seq", "_x"]
