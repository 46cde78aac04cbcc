"""The README's first command: scripts/example.sh prints the report of the bundled real
recording (the findings first, naming the known problem: its DataLoader workers, at the
line; the steps, the top tables), then converts the bundled Kineto trace and prints its
findings, readable at 100 columns, and ends pointing at `xpu-perf view`, not a web site; it
exits 0 (a pipeline cut short by SIGPIPE under pipefail once ended it with 141 before its
last line)."""

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
    findings = [i for i, line in enumerate(lines) if line.startswith("Findings")]
    assert len(findings) == 2, "the recording's findings, then the converted trace's"
    assert findings[0] < 40 and "none" not in lines[findings[0]]
    # The recording's known problem, at the line a user would change.
    first = lines[findings[0] + 1]
    assert first.startswith(" 1. Input pipeline") and "example_train.py:" in first, first
    assert "code     INPUT_PIPELINE" in "\n".join(lines[findings[0] : findings[0] + 14])
    assert lines[findings[1] + 1].startswith(" 1. ")
    assert any(line.startswith("Steps") for line in lines)
    assert any(line.startswith("Top GPU kernels") for line in lines)
    # The kernel table's C++ names are cut within their cell, not wrapped over lines.
    kernel_rows = [line for line in lines if line.startswith("│ ") and "µs" in line]
    assert kernel_rows and all(line.endswith("│") for line in kernel_rows)
    recorded = REPO / "bench" / "data" / "example_recorded.perfetto-trace"
    assert lines[-1] == f"  xpu-perf view {recorded}"
    assert "ui.perfetto.dev" not in run.stdout
    assert out.stat().st_size > 0
