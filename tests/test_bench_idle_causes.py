"""bench/workloads/idle_causes.py, the one module of the idle-cause programs both GPU suites
run (bench/answers_gpu.sh, bench/indirect_gpu.sh): its command line lists every mode without
torch, every mode has its program and its step count, and every mode a suite script runs or a
report expects is one of them.  (The programs themselves need a GPU: the suites run them.)"""

from __future__ import annotations

import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PROGRAMS = REPO / "bench" / "workloads" / "idle_causes.py"
# Programs of the indirect suite that are not modes of the module (their own scripts).
OTHER_PROGRAMS = {"gpt2", "ddp_host", "ddp_gpu"}


def _literal(path: Path, name: str) -> dict:
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"no {name} in {path}")


def _functions() -> set[str]:
    return {
        node.name
        for node in ast.parse(PROGRAMS.read_text()).body
        if isinstance(node, ast.FunctionDef)
    }


def test_help_lists_every_mode_without_torch() -> None:
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS), "--help"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    modes = _literal(PROGRAMS, "MODES")
    listed = re.findall(r"^  (\w+) {2,}\S", proc.stdout.split("modes:", 1)[1], re.M)
    assert listed == list(modes)
    assert len(modes) == 20


def test_every_mode_has_its_program_and_steps() -> None:
    modes = _literal(PROGRAMS, "MODES")
    assert set(_literal(PROGRAMS, "STEPS")) == set(modes)
    functions = _functions()
    assert {m for m in modes if f"run_{m}" not in functions} == set()
    # Each cause marker names a mode, and no mode is marked twice.
    marks = re.findall(r"# CAUSE:(\w+)", PROGRAMS.read_text())
    assert len(marks) == len(set(marks)) and set(marks) <= set(modes)


def test_the_suites_run_and_expect_only_modes() -> None:
    modes = set(_literal(PROGRAMS, "MODES"))
    for script in ("answers_gpu.sh", "indirect_gpu.sh"):
        text = (REPO / "bench" / script).read_text()
        assert "bench.workloads.idle_causes" in text, script
        lists = re.findall(r"(?:modes=\(|for mode in )([\w\s]+?)(?:\)|; do)", text)
        ran = {w for chunk in lists for w in chunk.split()}
        assert ran and ran <= modes, (script, ran - modes)
    for report in ("answers_report.py", "indirect_report.py"):
        expected = set(_literal(REPO / "bench" / report, "EXPECTED")) - OTHER_PROGRAMS
        assert expected <= modes, (report, expected - modes)


def test_a_mode_without_torch_says_so() -> None:
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("torch is installed: a mode would run its program")
    proc = subprocess.run(
        [sys.executable, str(PROGRAMS), "sync"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "idle_causes: torch is not installed in this Python; run it where it is"
    ]
