"""Mistakes on the command line (issue 35): a mistyped flag is answered by the command's own
usage with the nearest flag, a mistyped command by the nearest command; `--help` of the top
level and of `report` says what the findings are."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import run_cli

# The finding kinds, as the help must name them.
KINDS = ("host sync", "input pipeline", "between launches", "small kernels", "pageable", "FP32")


@pytest.mark.parametrize(
    ("args", "usage", "hint"),
    [
        (("report", "--fromat", "json"), "usage: xpu-perf report", "did you mean --format?"),
        (("report", "--fromat=json"), "usage: xpu-perf report", "did you mean --format?"),
        (("folded", "--mdoe", "gpu"), "usage: xpu-perf folded", "did you mean --mode?"),
        (("flamegraph", "--widht", "900", "-o", "x.svg"), "xpu-perf flamegraph", "--width?"),
        (("query", "--fromat", "csv"), "usage: xpu-perf query", "did you mean --format?"),
    ],
)
def test_mistyped_flag_names_the_nearest(
    tmp_path: Path, args: tuple[str, ...], usage: str, hint: str
) -> None:
    trace = tmp_path / "missing.perfetto-trace"  # never opened: the flag is wrong first
    extra = ("select 1",) if args[0] == "query" else ()
    proc = run_cli(*args, trace, *extra)
    assert proc.returncode == 2, proc.stderr
    assert usage in proc.stderr and hint in proc.stderr, proc.stderr
    assert "unrecognized arguments" in proc.stderr and "no such trace" not in proc.stderr
    assert proc.stdout == ""


def test_mistyped_command_names_the_nearest() -> None:
    proc = run_cli("reprot", "x.perfetto-trace")
    assert proc.returncode == 2
    assert "unknown command 'reprot'; did you mean 'report'?" in proc.stderr
    proc = run_cli("zzzz")
    assert proc.returncode == 2 and "one of: record, convert" in proc.stderr


def test_unknown_flag_without_a_near_one() -> None:
    proc = run_cli("report", "--zzzzzz", "x.perfetto-trace")
    assert proc.returncode == 2
    assert "usage: xpu-perf report" in proc.stderr and "did you mean" not in proc.stderr


@pytest.mark.parametrize("args", [("--help",), ("report", "--help")])
def test_help_says_what_the_findings_are(args: tuple[str, ...]) -> None:
    proc = run_cli(*args)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())
    assert "findings" in text.lower()
    for kind in KINDS:
        assert kind in text, kind
