"""The README's first command: scripts/example.sh converts the bundled example and prints the
report's answers (the findings first, the steps, the top tables), readable at 100 columns,
and ends pointing at `xpu-perf view`, not a web site; it exits 0 (a pipeline cut short by
SIGPIPE under pipefail once ended it with 141 before its last line)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_example_script_prints_the_findings(tmp_path: Path) -> None:
    out = tmp_path / "example.perfetto-trace"
    env = dict(os.environ, COLUMNS="100")
    if not (REPO / ".venv" / "bin" / "xpu-perf").exists():
        # A checkout without its own venv (a worktree): this interpreter runs its code.
        env.update(XPU_PERF_PYTHON=sys.executable, PYTHONPATH=str(REPO))
    run = subprocess.run(  # as the README runs it: the trace in the current directory
        ["bash", str(REPO / "scripts" / "example.sh")],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    for n, line in enumerate(lines, 1):
        assert len(line) <= 100, f"line {n} is {len(line)} wide: {line!r}"
        assert line == line.rstrip(), f"line {n} ends in spaces"
    findings = next(i for i, line in enumerate(lines) if line.startswith("Findings"))
    assert findings < 40 and "none" not in lines[findings]
    assert lines[findings + 1].startswith(" 1. ")
    assert any(line.startswith("Steps") for line in lines)
    assert any(line.startswith("Top GPU kernels") for line in lines)
    # The kernel table's C++ names are cut within their cell, not wrapped over lines.
    kernel_rows = [line for line in lines if line.startswith("│ ") and "µs" in line]
    assert kernel_rows and all(line.endswith("│") for line in kernel_rows)
    assert lines[-1] == f"the timeline, served offline: xpu-perf view {out.name}"
    assert "ui.perfetto.dev" not in run.stdout
    assert out.stat().st_size > 0
