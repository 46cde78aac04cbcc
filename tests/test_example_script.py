"""The README's first command: scripts/example.sh runs the main job on the bundled example and
exits 0 with every section printed (a pipeline cut short by SIGPIPE under pipefail ended it
with 141 before its last line)."""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_example_script_prints_every_section(tmp_path: Path) -> None:
    out = tmp_path / "example.perfetto-trace"
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "example.sh"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    lines = run.stdout.splitlines()
    assert "== top GPU kernels ==" in lines
    folded_at = lines.index("== folded stacks (gpu mode, ns), heaviest 5 ==")
    stacks = lines[folded_at + 1 : folded_at + 6]
    weights = [int(line.split("\t", 1)[0]) for line in stacks]
    assert len(weights) == 5 and weights == sorted(weights, reverse=True) and weights[0] > 0
    assert lines[-1] == f"open {out} in https://ui.perfetto.dev"
    assert out.stat().st_size > 0
