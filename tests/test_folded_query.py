"""`folded` and `query` on a converted H100 trace, through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import run_cli


def _lines(text: str) -> list[tuple[str, int]]:
    out = []
    for line in text.splitlines():
        stack, weight = line.rsplit(" ", 1)
        out.append((stack, int(weight)))
    return out


def test_gpu_folded_matches_kernel_time_and_has_context(example_trace: Path) -> None:
    # The whole trace (the default, the steady state: tests/test_stack_span.py).
    proc = run_cli(
        "folded", example_trace, "--mode", "gpu", "--unit", "ns", "--span", "all", check=True
    )
    lines = _lines(proc.stdout)
    kernel_lines = [(s, w) for s, w in lines if "[GPU_Kernel]" in s]
    with open_trace(example_trace) as t:
        total = t.scalar("select sum(dur) from slice where category = 'kernel'")
    assert abs(sum(w for _, w in kernel_lines) - total) <= total * 0.001
    for stack, _ in kernel_lines:
        frames = stack.split(";")
        api = frames[-2]
        assert api.startswith(("cuda", "cu")), stack
        # Context above the API frame: the thread root and at least one enclosing CPU op.
        assert len(frames) >= 4, stack
    assert any("[GPU_Memcpy]" in s for s, _ in lines)
    assert any("[GPU_Memset]" in s for s, _ in lines)


def test_samples_unit_follows_seed_convention(example_trace: Path, tmp_path: Path) -> None:
    ns = dict(_lines(run_cli("folded", example_trace, "--mode", "gpu", check=True).stdout))
    out = tmp_path / "s.folded"
    run_cli(
        "folded",
        example_trace,
        "--mode",
        "gpu",
        "--unit",
        "samples",
        "--freq",
        "100000",
        "-o",
        out,
        check=True,
    )
    samples = dict(_lines(out.read_text()))
    for stack, weight in samples.items():
        assert weight == round(ns[stack] * 100000 / 1e9)


def test_query_formats_and_errors(example_trace: Path, tmp_path: Path) -> None:
    proc = run_cli(
        "query",
        example_trace,
        "select count(*) as n from slice where category = 'kernel'",
        "--format",
        "json",
        check=True,
    )
    assert json.loads(proc.stdout) == [{"n": 311}]
    sql = tmp_path / "q.sql"
    sql.write_text("select key, display_value from xpu_metadata where key = 'convert_kernels'")
    proc = run_cli("query", example_trace, "-f", sql, "--format", "csv", check=True)
    assert proc.stdout.splitlines() == ["key,display_value", "convert_kernels,311"]

    bad = run_cli("query", example_trace, "select nope from slice")
    assert bad.returncode != 0 and bad.stderr.count("\n") == 1
    assert "no such column: nope" in bad.stderr

    missing = run_cli("query", tmp_path / "missing.perfetto-trace", "select 1")
    assert missing.returncode != 0 and "no such trace file" in missing.stderr
    assert "Traceback" not in missing.stderr

    truncated = tmp_path / "trunc.perfetto-trace"
    truncated.write_bytes(example_trace.read_bytes()[:-100])
    proc = run_cli("query", truncated, "select 1")
    assert proc.returncode != 0 and "truncated" in proc.stderr
    assert proc.stderr.count("\n") == 1
