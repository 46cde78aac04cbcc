"""The layer pages (docs/layers/) stay true to the tree (issue 36: a newcomer finds where a
new finding, a new source or a new output goes, so the pages must name every part and only
parts that exist).

- Every unit of the product code is claimed by the "## Owns" list of exactly one page: each
  module and package directly under collector/ and exporters/, each deeper package or module
  that tests/test_layers.py gives a layer row of its own (exporters/perfetto/engine/,
  collector/gpu_metrics/catalog.py), each folder of cupti_inject/, and bpf/ and protos/.
  A new package without a page fails here; so does an Owns entry that names no unit.
- Every path a page names exists: a repository path (`collector/...`, `tests/...`), a glob
  that matches something, a `path:name` whose file defines `name`, a bare file name
  (`gaps.sql`) that some file of the tree has, and every Markdown link, its #anchor included.
- Every page is linked from docs/ARCHITECTURE.md (the "Layers" table).
"""

from __future__ import annotations

import ast
import fnmatch
import os
import re
from collections.abc import Iterable
from pathlib import Path

from tests.test_layers import LAYERS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted((DOCS / "layers").glob("*.md"))
ARCHITECTURE = DOCS / "ARCHITECTURE.md"
# The product's code (Python packages, the C libraries, the BPF programs, the stream schema).
PY_PACKAGES = ("collector", "exporters")
C_TREE = "cupti_inject"
WHOLE_FOLDERS = ("bpf", "protos")
# Where repository paths start; a path under one of these is checked.
TOP = (
    "collector",
    "exporters",
    "cupti_inject",
    "bpf",
    "protos",
    "tests",
    "bench",
    "scripts",
    "docs",
)
# `<name>` in a path stands for any name: `collector/commands/<name>.py`.
PATH = re.compile(rf"(?<![\w./$~<-])((?:{'|'.join(TOP)})/(?:[\w./*-]|<\w+>)*)")
# A repository path followed by `:name` inside backticks: a function, class, constant,
# method (`Class.method`), SQL table or view, or C symbol the file defines.
SYMBOL = re.compile(rf"`((?:{'|'.join(TOP)})/[\w./-]+):([A-Za-z_][\w.]*)`")
# A bare file name in backticks (`gaps.sql`, `stream.c`): some file of the tree has it.
BARE = re.compile(r"`([\w-]+\.(?:py|sql|c|h|def|sh))`")
# Names of files that are not ours, which pages may mention.
NOT_OURS = {
    "cupti_profiler_host.h": "CUDA's header (CUDA 13 includes <string> from it)",
}
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _ignored_names(root: Path) -> list[str]:
    """Single-component patterns of .gitignore (build/, __pycache__/): not product folders."""
    names = ["__pycache__"]
    gitignore = root / ".gitignore"
    if gitignore.exists():
        for line in gitignore.read_text().splitlines():
            pattern = line.strip().strip("/")
            if pattern and not pattern.startswith("#") and "/" not in pattern:
                names.append(pattern)
    return names


def product_units(root: Path) -> set[str]:
    """The parts of the product a layer page must claim, as the Owns lists spell them
    (a folder with a trailing slash)."""
    ignored = _ignored_names(root)

    def skip(path: Path) -> bool:
        return any(fnmatch.fnmatch(path.name, p) for p in ignored)

    units: set[str] = set()
    for package in PY_PACKAGES:
        for child in sorted((root / package).iterdir()):
            if skip(child) or child.name == "__init__.py":
                continue
            if child.is_file() and child.suffix == ".py":
                units.add(f"{package}/{child.name}")
            elif child.is_dir() and any(child.rglob("*.py")):
                units.add(f"{package}/{child.name}/")
    for name in LAYERS:
        parts = name.split(".")
        if len(parts) > 2:
            path = root.joinpath(*parts)
            if path.is_dir():
                units.add("/".join(parts) + "/")
            elif path.with_suffix(".py").is_file():
                units.add("/".join(parts) + ".py")
    for child in sorted((root / C_TREE).iterdir()):
        if child.is_dir() and not skip(child):
            units.add(f"{C_TREE}/{child.name}/")
    units.update(f"{folder}/" for folder in WHOLE_FOLDERS if (root / folder).is_dir())
    return units


def owned(text: str) -> list[str]:
    """The entries of a page's "## Owns" list: the first backticked path of each bullet."""
    match = re.search(r"^## Owns\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    if match is None:
        return []
    return re.findall(r"^- `([^`]+)`", match.group(1), re.M)


def claims(pages: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """unit -> the pages whose Owns list names it."""
    found: dict[str, list[str]] = {}
    for name, text in pages:
        for entry in owned(text):
            found.setdefault(entry, []).append(name)
    return found


def unclaimed(units: Iterable[str], claimed: dict[str, list[str]]) -> list[str]:
    return sorted(u for u in units if not claimed.get(u))


def _pages() -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in PAGES]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    in_code = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        m = None if in_code else re.match(r"^#{1,6} (.+)$", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def _defines(path: Path, name: str) -> bool:
    text = path.read_text()
    if path.suffix == ".py":
        scope: list[ast.stmt] = ast.parse(text).body
        for part in name.split("."):
            hit = None
            for node in scope:
                targets: list[ast.expr] = []
                if isinstance(node, ast.Assign):
                    targets = node.targets
                elif isinstance(node, ast.AnnAssign):
                    targets = [node.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if getattr(node, "name", None) == part or part in names:
                    hit = node
                    break
            if hit is None:
                return False
            scope = getattr(hit, "body", [])
        return True
    if path.suffix == ".sql":
        create = r"CREATE\s+(?:OR\s+REPLACE\s+)?(?:PERFETTO\s+)?(?:VIEW|TABLE|INDEX|MACRO|FUNCTION)"
        return re.search(rf"{create}\s+{re.escape(name)}\b", text, re.I) is not None
    return re.search(rf"\b{re.escape(name)}\b", text) is not None


def _tree_names() -> set[str]:
    """The names of the tree's files and folders, build outputs and the venv left out (not
    even walked: a venv holds a hundred thousand files)."""
    ignored = [*_ignored_names(ROOT), ".git"]
    names = set()
    for _, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if not any(fnmatch.fnmatch(d, p) for p in ignored)]
        names.update(dirs)
        names.update(files)
    return names


def _ignored_paths() -> list[str]:
    """Anchored folders of .gitignore (/tests/artifacts/): outputs a page may name."""
    out = []
    for line in (ROOT / ".gitignore").read_text().splitlines():
        line = line.strip()
        if line.startswith("/") and "*" not in line:
            out.append(line.strip("/"))
    return out


def wrong_paths(name: str, text: str, tree_names: set[str]) -> list[str]:
    wrong = []
    ignored = _ignored_paths()
    for m in PATH.finditer(text):
        path = m.group(1).rstrip(".,")
        if any(path == i or path.startswith(i + "/") for i in ignored):
            continue
        pattern = re.sub(r"<\w+>", "*", path)
        exists = any(ROOT.glob(pattern)) if "*" in pattern else (ROOT / path).exists()
        # `collector/inject_build.build_sampler`: a module's name, written as a path.
        module, _, attr = path.rpartition(".")
        if not exists and attr and (ROOT / f"{module}.py").is_file():
            exists = _defines(ROOT / f"{module}.py", attr)
        if not exists:
            wrong.append(f"{name}: no {path}")
    for m in SYMBOL.finditer(text):
        path, symbol = ROOT / m.group(1), m.group(2)
        if path.is_file() and not _defines(path, symbol):
            wrong.append(f"{name}: {m.group(1)} defines no {symbol}")
    for m in BARE.finditer(text):
        if m.group(1) not in tree_names and m.group(1) not in NOT_OURS:
            wrong.append(f"{name}: no file named {m.group(1)} in the tree")
    return wrong


def broken_links(page: Path, text: str) -> list[str]:
    wrong = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            wrong.append(f"{page.name}: link to {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
            wrong.append(f"{page.name}: link to {target}: no such heading")
    return wrong


def test_every_unit_is_on_exactly_one_layer_page() -> None:
    claimed = claims(_pages())
    missing = unclaimed(product_units(ROOT), claimed)
    assert not missing, (
        "on no layer page: "
        + ", ".join(missing)
        + "\nadd each to the '## Owns' list of its layer's page in docs/layers/ "
        "(tests/test_layers.py LAYERS says its layer; docs/ARCHITECTURE.md's table, the page)"
    )
    twice = {unit: pages for unit, pages in claimed.items() if len(pages) > 1}
    assert not twice, f"owned by more than one page: {twice}"


def test_every_owns_entry_is_a_unit_of_the_tree() -> None:
    units = product_units(ROOT)
    stray = sorted(
        f"{page} owns {entry}"
        for entry, pages in claims(_pages()).items()
        if entry not in units
        for page in pages
    )
    assert not stray, "not a unit of the product code (mistyped, moved, gone):\n" + "\n".join(stray)


def test_every_path_on_a_layer_page_exists() -> None:
    names = _tree_names()
    wrong = [w for name, text in _pages() for w in wrong_paths(name, text, names)]
    assert not wrong, "\n".join(wrong)


def test_every_link_resolves() -> None:
    wrong = [w for p in [*PAGES, ARCHITECTURE] for w in broken_links(p, p.read_text())]
    assert not wrong, "\n".join(wrong)


# What a newcomer looks for on every page, in this order.
SECTIONS = ("## Owns", "## May import", "## Data contracts", "## Entry points", "## How to add...")


def test_every_page_has_the_sections() -> None:
    wrong = []
    for name, text in _pages():
        found = [line for line in text.splitlines() if line in SECTIONS]
        if found != list(SECTIONS):
            wrong.append(f"{name}: {found}")
    assert not wrong, f"each page has {SECTIONS} in order:\n" + "\n".join(wrong)


def test_every_layer_page_is_linked_from_architecture() -> None:
    text = ARCHITECTURE.read_text()
    assert PAGES, "no pages in docs/layers/"
    unlinked = [p.name for p in PAGES if f"](layers/{p.name}" not in text]
    assert not unlinked, f"not linked from docs/ARCHITECTURE.md: {unlinked}"


def test_the_checks_catch_a_new_package_and_a_wrong_path(tmp_path: Path) -> None:
    """The rules themselves, on a tree and pages made up here: a package no page owns, an
    entry two pages own, a path and a symbol that do not exist."""
    for rel in (
        "collector/model.py",
        "collector/newpkg/__init__.py",
        "collector/newpkg/thing.py",
        "collector/__pycache__/x.pyc",
        "exporters/report/queries.py",
        "cupti_inject/src/stream.c",
        "bpf/a.bpf.c",
        "protos/cupti_stream.def",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("")
    units = product_units(tmp_path)
    assert "collector/newpkg/" in units and "collector/__pycache__/" not in units
    pages = [
        ("a.md", "# A\n## Owns\n- `collector/model.py` — x\n- `exporters/report/` — y\n## Next\n"),
        (
            "b.md",
            "# B\n## Owns\n- `cupti_inject/src/`\n- `bpf/`\n- `protos/`\n- `exporters/report/`\n",
        ),
    ]
    claimed = claims(pages)
    assert unclaimed(units, claimed) == ["collector/newpkg/"]
    assert claimed["exporters/report/"] == ["a.md", "b.md"]
    text = "`collector/nothing_here.py`, `collector/model.py:NoSuchThing`, `nosuch.sql`"
    assert wrong_paths("p.md", text, _tree_names()) == [
        "p.md: no collector/nothing_here.py",
        "p.md: collector/model.py defines no NoSuchThing",
        "p.md: no file named nosuch.sql in the tree",
    ]
    assert wrong_paths("p.md", "`collector/model.py:SliceBatch.slices`", _tree_names()) == []
