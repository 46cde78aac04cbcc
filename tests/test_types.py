"""The type check: mypy over collector and exporters (pyproject.toml's [tool.mypy]) finds
no error, and the escapes from it (the name `Any`, `type: ignore` comments) in the tree's
code outside tests/ are no more than the ceilings in tests/data/type_debt.json."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tokenize
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEBT = Path(__file__).resolve().parent / "data" / "type_debt.json"
_IGNORE = re.compile(r"#\s*type:\s*ignore\b")
_SKIPPED_DIRS = {"tests", "build", "dist", "__pycache__"}


def code_files(root: Path = REPO) -> list[Path]:
    """The tree's .py files outside tests/ (and outside hidden and build folders)."""
    return [
        p
        for p in sorted(root.rglob("*.py"))
        if not any(
            part in _SKIPPED_DIRS or part.startswith(".") for part in p.relative_to(root).parts
        )
    ]


def type_debt(source: str) -> tuple[int, int]:
    """(uses of the name `Any`, `type: ignore` comments) in one file's source: tokens, so
    the word in a docstring or a string does not count."""
    any_names = ignores = 0
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and tok.string == "Any":
            any_names += 1
        elif tok.type == tokenize.COMMENT and _IGNORE.search(tok.string):
            ignores += 1
    return any_names, ignores


def test_type_debt_counts_names_and_comments_not_words() -> None:
    source = (
        "from typing import Any  # type: ignore[import]\n"
        "x: dict[str, Any] = {}  # Any in a comment\n"
        "y = 'Any # type: ignore'  # type:ignore\n"
        '"""Anything, Any."""\n'
        "AnyOther = 1\n"
    )
    assert type_debt(source) == (2, 2)


def test_mypy_finds_no_error() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    # The config's cache_dir (.mypy_cache, ignored by git): a later run checks only what changed.
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"mypy (pyproject.toml [tool.mypy]):\n{run.stdout}{run.stderr}"


def test_any_and_type_ignore_stay_under_their_ceilings() -> None:
    ceilings = json.loads(DEBT.read_text())
    per_file = {p: type_debt(p.read_text()) for p in code_files()}
    any_names = sum(a for a, _ in per_file.values())
    ignores = sum(i for _, i in per_file.values())

    def worst(which: int) -> str:
        ranked = sorted(per_file.items(), key=lambda kv: -kv[1][which])[:5]
        return ", ".join(f"{p.relative_to(REPO)} {n[which]}" for p, n in ranked if n[which])

    assert any_names <= ceilings["any"], (
        f"{any_names} uses of Any, ceiling {ceilings['any']}: type it instead (most in {worst(0)})"
    )
    assert ignores <= ceilings["type_ignore"], (
        f"{ignores} type: ignore comments, ceiling {ceilings['type_ignore']}: fix the error "
        f"instead (most in {worst(1)})"
    )
