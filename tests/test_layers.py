"""Imports go one way down: the tree-wide layer test (issue 36, item 1).

Every module of collector/ and exporters/ is read with `ast` (module-level and
function-level imports alike: a lazy import is still a dependency), mapped to a layer by
LAYERS, and checked against two rules:

- (a) no package cycle: a package (a folder such as collector.sources, or a top-level
  module such as collector.launch_join) never reaches itself through the imports of its
  modules;
- (b) no import from a layer to one it may not use (MAY_IMPORT): mostly "never upward",
  plus the issue's side rules (producers never import readers or the engine, readers
  never import producers or merge).

A violation too big to fix at once is listed in KNOWN_BACK_ARROWS with its reason and
issue, so any *new* back-arrow or cycle still fails.  docs/ARCHITECTURE.md ("Layers")
draws the same picture.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("collector", "exporters")

# Layer of each module: the longest prefix in this table that matches the module's dotted
# name.  Bottom-up:
#   core      the event model, frames and names, file safety, errors, catalogues, the
#             window-control vocabulary: imported by everyone, imports nothing above.
#   encoder   exporters.perfetto: the one Perfetto writer (packets, interning, tracks)
#             and the engine's size limits (constants both sides read).
#   producers sources (CUPTI, eBPF, sampler, Kineto files), recording (one run's
#             orchestration), GPU metrics sampling, the launch join: they hand batches
#             to the encoder.
#   engine    exporters.perfetto.engine: trace_processor (native shell or embedded wasm),
#             its views and its caches.
#   merge     collector.merge: reads traces (engine, packet reader) and writes one (encoder).
#   readers   analysis (the model of one trace), folded, report, batch query.
#   commands  one module per subcommand, and the CLI: may import anything.
LAYERS: dict[str, str] = {
    "collector": "core",  # the package itself: __version__
    "collector.model": "core",
    "collector.arrays": "core",
    "collector.frames": "core",
    "collector.frame_names": "core",
    "collector.files": "core",
    "collector.owned_files": "core",
    "collector.errors": "core",
    "collector.visible_text": "core",
    "collector.cache_trust": "core",
    "collector.symbolize": "core",
    "collector.elf_tables": "core",
    "collector.window_control": "core",
    "collector.window_spans": "core",
    "collector.gc_pause": "core",
    "collector.gpu_metrics.catalog": "core",
    "exporters": "core",  # the package itself: empty
    "exporters.perfetto": "encoder",
    "exporters.perfetto.engine": "engine",
    "collector.sources": "producers",
    "collector.recording": "producers",
    "collector.gpu_metrics": "producers",
    "collector.launch_join": "producers",
    "collector.inject_build": "producers",
    "collector.setup_check": "producers",
    "collector.merge": "merge",
    "exporters.analysis": "readers",
    "exporters.folded": "readers",
    "exporters.report": "readers",
    "collector.batch_query": "readers",
    "collector.commands": "commands",
    "collector.cli": "commands",
    "collector.cli_text": "commands",
}

# Which layers each layer may import (itself included).
MAY_IMPORT: dict[str, set[str]] = {
    "core": {"core"},
    "encoder": {"core", "encoder"},
    "producers": {"core", "encoder", "producers"},
    "engine": {"core", "encoder", "engine"},
    "merge": {"core", "encoder", "engine", "merge"},
    "readers": {"core", "engine", "readers"},
    "commands": {"core", "encoder", "producers", "engine", "merge", "readers", "commands"},
}

# Imports that break a rule today and are too big to move in one step: (importer,
# imported module) -> why, and where the fix is tracked.  Empty is the goal.
KNOWN_BACK_ARROWS: dict[tuple[str, str], str] = {}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules `name` imports, at any depth of its code."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                # `from collector import model` imports the module collector.model.
                sub = f"{module}.{alias.name}"
                found.add(sub if sub in MODULES else module)
    return {m for m in found if m.split(".")[0] in PACKAGES}


def _resolve(module: str) -> str:
    """The project module an import names (`a.b.c` where c is a name inside a.b: a.b)."""
    while module not in MODULES and "." in module:
        module = module.rsplit(".", 1)[0]
    return module


def layer_of(module: str) -> str:
    matches = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    best = max(matches, key=len, default=None)
    assert best is not None, f"{module} has no layer: add it to LAYERS in tests/test_layers.py"
    return LAYERS[best]


def package_of(module: str) -> str:
    """The unit of the cycle rule: a module's folder, or a top-level module itself."""
    path = MODULES[module]
    if path.name == "__init__.py" or len(module.split(".")) <= 2:
        return module
    return module.rsplit(".", 1)[0]


def import_graph() -> dict[str, set[str]]:
    return {name: {_resolve(m) for m in _imports(name, path)} for name, path in MODULES.items()}


def back_arrows(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for importer, imported in sorted(graph.items()):
        for module in sorted(imported):
            src, dst = layer_of(importer), layer_of(module)
            if dst not in MAY_IMPORT[src] and (importer, module) not in KNOWN_BACK_ARROWS:
                found.append(f"{importer} ({src}) imports {module} ({dst})")
    return found


def package_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of packages (Tarjan), each a cycle of two or more."""
    edges: dict[str, set[str]] = defaultdict(set)
    for importer, imported in graph.items():
        for module in imported:
            if (importer, module) in KNOWN_BACK_ARROWS:
                continue
            a, b = package_of(importer), package_of(module)
            if a != b:
                edges[a].add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted({package_of(m) for m in MODULES}):
        if node not in index:
            visit(node)
    return groups


def _cycle_witnesses(graph: dict[str, set[str]], group: list[str]) -> list[str]:
    members = set(group)
    return sorted(
        f"{importer} -> {module}"
        for importer, imported in graph.items()
        for module in imported
        if package_of(importer) in members
        and package_of(module) in members
        and package_of(importer) != package_of(module)
    )


def test_every_module_has_a_layer() -> None:
    missing = [m for m in MODULES if not any(m == p or m.startswith(p + ".") for p in LAYERS)]
    assert not missing, f"add these to LAYERS: {missing}"


def test_the_graph_sees_function_level_imports() -> None:
    # A lazy import is a dependency too: batch_query reaches the engine only inside a function.
    assert any(layer_of(m) == "engine" for m in import_graph()["collector.batch_query"])


def test_imports_go_only_downward() -> None:
    arrows = back_arrows(import_graph())
    assert not arrows, "imports against the layers:\n" + "\n".join(arrows)


def test_exporters_use_only_the_core_of_collector() -> None:
    # The rule in its own words: collector/ holds the shared core and the producers
    # and commands; exporters reach only the core (batch_query, a reader kept in collector/,
    # is imported by commands, never by exporters).
    outside = sorted(
        f"{importer} imports {module} ({layer_of(module)})"
        for importer, imported in import_graph().items()
        if importer.startswith("exporters")
        for module in imported
        if module.startswith("collector") and layer_of(module) != "core"
    )
    assert not outside, "\n".join(outside)


def test_no_package_cycle() -> None:
    graph = import_graph()
    cycles = package_cycles(graph)
    text = "\n".join(
        " <-> ".join(g) + ":\n  " + "\n  ".join(_cycle_witnesses(graph, g)) for g in cycles
    )
    assert not cycles, "package cycles:\n" + text


def test_known_back_arrows_still_exist() -> None:
    # An exception that was fixed must leave the list, or it would hide a new one.
    graph = import_graph()
    stale = [pair for pair in KNOWN_BACK_ARROWS if pair[1] not in graph.get(pair[0], set())]
    assert not stale, f"fixed, remove from KNOWN_BACK_ARROWS: {stale}"


def test_the_checks_catch_a_back_arrow_and_a_cycle() -> None:
    # The rules themselves, on a made-up graph: a source importing a reader, and two
    # packages importing each other.
    graph = {name: set() for name in MODULES}
    graph["collector.sources.kineto"] = {"exporters.report.sections"}
    graph["exporters.report.sections"] = {"collector.sources.kineto"}
    assert back_arrows(graph) == [
        "collector.sources.kineto (producers) imports exporters.report.sections (readers)",
        "exporters.report.sections (readers) imports collector.sources.kineto (producers)",
    ]
    assert package_cycles(graph) == [["collector.sources", "exporters.report"]]
