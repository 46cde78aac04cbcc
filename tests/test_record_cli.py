"""`xpu-perf record --no-gpu` end to end through the CLI: real eBPF (root), real trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.native.bpf_harness import requires_bpf
from tests.native.build import build_all

from .conftest import run_cli

pytestmark = requires_bpf


@pytest.fixture(scope="module")
def two_callers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_all(tmp_path_factory.mktemp("native"))["two_callers"]


def test_record_no_gpu_then_folded_cpu(two_callers: Path, tmp_path: Path) -> None:
    out = tmp_path / "rec.perfetto-trace"
    proc = run_cli("record", "--no-gpu", "--freq", "999", "-o", out, "--", two_callers, "2")
    assert proc.returncode == 0, proc.stderr
    assert "cpu samples:" in proc.stderr
    folded = run_cli("folded", out, "--mode", "cpu", "--unit", "samples", check=True).stdout
    weights = {"heavy_caller": 0, "light_caller": 0}
    for line in folded.splitlines():
        stack, weight = line.rsplit(" ", 1)
        for fn in weights:
            if f";{fn};" in stack:
                weights[fn] += int(weight)
    total = sum(weights.values())
    assert total > 1000
    # two_callers burns 3 units in heavy_caller for each unit in light_caller.
    assert abs(weights["heavy_caller"] / total - 0.75) <= 0.75 * 0.05


def test_record_passes_exit_code_through(tmp_path: Path) -> None:
    out = tmp_path / "rec.perfetto-trace"
    proc = run_cli("record", "--no-gpu", "-o", out, "--", "sh", "-c", "exit 7")
    assert proc.returncode == 7, proc.stderr
    assert out.exists()
