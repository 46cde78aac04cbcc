"""The layout of `record` and the CUPTI source: modules a reader can take one at a time.

- `collector/commands/record.py` stays the short story of a recording (options, sources,
  target, trace, summary); the details live in collector/recording/;
- no module of collector/recording/ or of the CUPTI source (collector/sources/cupti*.py)
  uses another module's private (underscore) names, by `from x import _y` or as `x._y`;
- no import cycle among those modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "collector/commands/record.py"
MODULES = {
    **{f"collector.recording.{p.stem}": p for p in (ROOT / "collector/recording").glob("*.py")},
    **{f"collector.sources.{p.stem}": p for p in (ROOT / "collector/sources").glob("cupti*.py")},
    "collector.commands.record": RECORD,
}
MAX_RECORD_LINES = 200


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _imports(tree: ast.Module) -> list[tuple[str, list[str], str | None]]:
    """(module of the group, names imported from it, local name of the module if bound)."""
    out: list[tuple[str, list[str], str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in MODULES:
                out.append((node.module, [a.name for a in node.names], None))
            for a in node.names:  # from collector.recording import gpu
                if f"{node.module}.{a.name}" in MODULES:
                    out.append((f"{node.module}.{a.name}", [], a.asname or a.name))
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name in MODULES:
                    out.append((a.name, [], a.asname))
    return out


def test_record_command_is_short() -> None:
    lines = len(RECORD.read_text().splitlines())
    assert lines <= MAX_RECORD_LINES, f"record.py has {lines} lines: move details below it"


def test_no_private_name_crosses_a_module() -> None:
    found = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(), str(path))
        bound = set()
        for module, names, local in _imports(tree):
            found += [f"{name}: from {module} import {n}" for n in names if _private(n)]
            if local:
                bound.add(local)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in bound
                and _private(node.attr)
            ):
                found.append(f"{name}: {node.value.id}.{node.attr}")
    assert not found


def test_no_import_cycle() -> None:
    graph = {
        name: {m for m, _, _ in _imports(ast.parse(path.read_text()))}
        for name, path in MODULES.items()
    }
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        if node in path:
            raise AssertionError(" -> ".join([*path[path.index(node) :], node]))
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, [*path, node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
