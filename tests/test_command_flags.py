"""Flags that several subcommands take are defined once (collector/commands/flags.py), and
every command still takes its flags.

The definitions are found by reading the command modules with `ast`: an option string
("--window", "-o") in two add_argument calls is a copy that can drift (it did: `--window`
was written out in three commands).  Then the real parser reads one command line per
command using each shared flag, and the values land where the commands read them."""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
from collections import defaultdict
from pathlib import Path

import pytest

from collector import cli

ROOT = Path(__file__).resolve().parent.parent
CLI_MODULES = [*sorted((ROOT / "collector/commands").glob("*.py")), ROOT / "collector/cli.py"]


def option_definitions(paths: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    """Each option string given to add_argument in these files: where (file:line)."""
    where: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"):
                        where[str(arg.value)].append(f"{path.relative_to(root)}:{node.lineno}")
    return where


def test_no_flag_is_defined_twice() -> None:
    where = option_definitions(CLI_MODULES)
    assert "--window" in where and "-o" in where  # the scan sees the flags module
    twice = {flag: places for flag, places in where.items() if len(places) > 1}
    assert twice == {}, "define a shared flag once, in collector/commands/flags.py"


def test_the_scan_finds_a_copy(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f(p):\n    p.add_argument('--window', type=int)\n")
    (tmp_path / "b.py").write_text(
        "def g(p):\n    p.add_argument('-o', '--output')\n    p.add_argument('--window')\n"
        "    p.add_argument('trace')\n"
    )
    where = option_definitions([tmp_path / "a.py", tmp_path / "b.py"], tmp_path)
    assert where == {"--window": ["a.py:2", "b.py:3"], "-o": ["b.py:2"], "--output": ["b.py:2"]}


SHARED = ["--trace-processor", "/opt/tp", "--no-cache"]
FRAMES = ["--full-names", "--all-frames"]
# One command line per command with every shared flag it takes, and what the parser must give.
LINES: dict[str, tuple[list[str], dict[str, object]]] = {
    "record": (
        ["-o", "r.perfetto-trace", "-q", "--", "true"],
        {"output": Path("r.perfetto-trace"), "quiet": True},
    ),
    "convert": (
        ["in.json.gz", "-o", "c.perfetto-trace", "-q"],
        {"output": Path("c.perfetto-trace"), "quiet": True},
    ),
    "merge": (
        ["a.pt", "b.pt", "-o", "m.pt", "-q", "--trace-processor", "/opt/tp"],
        {"output": Path("m.pt"), "quiet": True, "trace_processor": "/opt/tp"},
    ),
    "query": (
        ["t.pt", "select 1", "--format", "csv", *SHARED],
        {"format": "csv", "trace_processor": "/opt/tp", "no_cache": True},
    ),
    "folded": (
        [
            "t.pt",
            "-o",
            "f.txt",
            "--mode",
            "gpu",
            "--unit",
            "us",
            "--span",
            "all",
            "--window",
            "2",
            *FRAMES,
            *SHARED,
        ],
        {
            "output": Path("f.txt"),
            "mode": "gpu",
            "unit": "us",
            "span": "all",
            "window": 2,
            "full_names": True,
            "all_frames": True,
            "trace_processor": "/opt/tp",
            "no_cache": True,
        },
    ),
    "flamegraph": (
        [
            "t.pt",
            "-o",
            "f.svg",
            "--mode",
            "idle",
            "--unit",
            "samples",
            "--span",
            "active",
            "--window",
            "3",
            *FRAMES,
            *SHARED,
        ],
        {
            "output": Path("f.svg"),
            "mode": "idle",
            "unit": "samples",
            "span": "active",
            "window": 3,
            "full_names": True,
            "all_frames": True,
            "trace_processor": "/opt/tp",
            "no_cache": True,
        },
    ),
    "report": (
        [
            "t.pt",
            "--steps",
            "Step*",
            "--format",
            "json",
            "--span",
            "active",
            "--window",
            "1",
            "-o",
            "r.html",
            *FRAMES,
            *SHARED,
        ],
        {
            "steps": "Step*",
            "format": "json",
            "span": "active",
            "window": 1,
            "output": Path("r.html"),
            "full_names": True,
            "all_frames": True,
            "trace_processor": "/opt/tp",
            "no_cache": True,
        },
    ),
    "view": (["t.pt", "--span", "all", "--steps", "Step*"], {"span": "all", "steps": "Step*"}),
}
# What each command gives where a shared flag is left out.
DEFAULTS: dict[str, tuple[list[str], dict[str, object]]] = {
    "record": (["--", "true"], {"output": Path("xpu-perf.perfetto-trace"), "quiet": False}),
    "folded": (
        ["t.pt"],
        {"output": None, "mode": "merge", "unit": "ns", "span": "steps", "window": None},
    ),
    "report": (["t.pt"], {"steps": None, "format": "table", "span": "steps", "output": None}),
    "query": (["t.pt", "select 1"], {"format": "table", "no_cache": False}),
    "view": (["t.pt"], {"span": "steps", "steps": None}),
}


def _parse(argv: list[str]) -> argparse.Namespace:
    return cli.build_parser(argv).parse_args(argv)


@pytest.mark.parametrize("command", cli.COMMANDS)
def test_every_command_takes_its_flags(command: str) -> None:
    argv, want = LINES[command]
    args = _parse([command, *argv])
    assert {k: getattr(args, k) for k in want} == want


@pytest.mark.parametrize("command", sorted(DEFAULTS))
def test_shared_flags_default(command: str) -> None:
    argv, want = DEFAULTS[command]
    args = _parse([command, *argv])
    assert {k: getattr(args, k) for k in want} == want


@pytest.mark.parametrize("command", ["merge", "flamegraph"])
def test_output_required_where_it_is(command: str) -> None:
    argv = ["a.pt", "b.pt"] if command == "merge" else ["t.pt"]
    with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit):
        _parse([command, *argv])
    assert "-o/--output" in err.getvalue()


def test_span_choices_are_the_readers() -> None:
    """--span's choices come from the light module (ui_opening) for `view`'s sake; the
    stacks' span module (scope) must name the same spans."""
    from exporters.report import scope, ui_opening

    assert scope.SPANS == ui_opening.SPANS == ("steps", "active", "all")
    for command in ("folded", "flamegraph", "report", "view"):
        out = ["-o", "x"] if command == "flamegraph" else []
        with contextlib.redirect_stderr(io.StringIO()) as err, pytest.raises(SystemExit):
            _parse([command, "t.pt", "--span", "nope", *out])
        assert "--span: invalid choice: 'nope'" in err.getvalue()
