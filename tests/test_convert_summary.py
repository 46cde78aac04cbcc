"""convert's summary fits the terminal: at COLUMNS=80 and 100 no line is wider, a wrapped
fact continues indented under its own line (never at column 0), and each suggested next
command is on one line, whole, so it can be pasted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import EXAMPLE, REPO


def _convert(cwd: Path, out: str, columns: int) -> list[str]:
    env = {**os.environ, "COLUMNS": str(columns), "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "convert", str(EXAMPLE), "-o", out],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
        check=True,
    )
    return proc.stderr.splitlines()


@pytest.mark.parametrize("columns", [80, 100])
def test_summary_fits_the_width(columns: int, tmp_path: Path) -> None:
    lines = _convert(tmp_path, "example.perfetto-trace", columns)
    assert len(lines) >= 6, lines
    assert lines[0].startswith("example.perfetto-trace  (")
    for line in lines:
        assert len(line) <= columns, (len(line), line)
        assert line == line.rstrip(), repr(line)
    assert all(line.startswith("  ") for line in lines[1:]), lines
    text = "\n".join(lines)
    for fact in ("kernels", "CUDA API calls", "API->GPU", "skipped"):
        assert fact in text
    for command in ("report", "view"):
        assert sum(f"xpu-perf {command} example.perfetto-trace" in line for line in lines) == 1
    assert any(line.startswith("  next: xpu-perf report ") for line in lines), lines


def test_a_command_wider_than_the_line_stays_whole(tmp_path: Path) -> None:
    """A path longer than the line: the command on a line of its own, unbroken (the
    only line allowed past the width)."""
    name = "a-rather-long-output-name-" + "x" * 60 + ".perfetto-trace"
    lines = _convert(tmp_path, name, 80)
    assert f"    xpu-perf report {name}" in lines, lines
    assert f"    xpu-perf view {name}" in lines, lines
    wide = [line for line in lines if len(line) > 80]
    assert all(name in line for line in wide), wide
    assert all(line.startswith("  ") for line in lines[1:]), lines
