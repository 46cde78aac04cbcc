"""Issue 34 L7, W5 and an old wording: a command's outputs never silently replace one
another, an output it cannot write with the options given is refused, and the message
about overwriting the input fits the command line that caused it.

Before: `report T --annotate F -o F` exited 0 saying "wrote F" twice, one output replaced
by the other; `report --ranks ... --annotate OUT` wrote nothing, silently; `convert X -o X`
said "pass -o" to a command line that had passed it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from .conftest import EXAMPLE, run_cli


def _assert_one_line_error(proc, *needles: str) -> None:
    err = proc.stderr.strip()
    assert proc.returncode != 0, (proc.returncode, proc.stdout[-500:], err)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1 and ": error: " in lines[0], err
    for needle in needles:
        assert needle in lines[0], (needle, err)


def _names_of_one_file(tmp_path: Path) -> list[tuple[str, str]]:
    """Pairs of names that reach one output file: the same text, another spelling, a
    symlink to it (the file not made yet), and a hard link to an existing file."""
    sub = tmp_path / "sub"
    sub.mkdir()
    (tmp_path / "link.html").symlink_to(tmp_path / "out.html")
    existing = tmp_path / "existing.html"
    existing.write_text("kept\n")
    os.link(existing, tmp_path / "hard.html")
    return [
        (str(tmp_path / "out.html"), str(tmp_path / "out.html")),
        (str(tmp_path / "out.html"), str(sub / ".." / "out.html")),
        (str(tmp_path / "out.html"), str(tmp_path / "link.html")),
        (str(existing), str(tmp_path / "hard.html")),
    ]


def test_report_refuses_two_outputs_in_one_file(example_trace: Path, tmp_path: Path) -> None:
    for page, annotated in _names_of_one_file(tmp_path):
        before = sorted(
            (p.name, p.read_text() if p.exists() else None) for p in tmp_path.glob("*.html")
        )
        proc = run_cli("report", example_trace, "-o", page, "--annotate", annotated)
        _assert_one_line_error(proc, "-o", "--annotate", "same file")
        after = sorted(
            (p.name, p.read_text() if p.exists() else None) for p in tmp_path.glob("*.html")
        )
        assert after == before, (page, annotated)  # nothing written
        assert not (tmp_path / "out.html").exists()
        assert proc.stdout == ""  # refused before any work, not after printing the report
    # Two names, two files: both written.
    proc = run_cli(
        "report", example_trace, "-o", tmp_path / "a.html", "--annotate", tmp_path / "b.pftrace"
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "a.html").read_text().lower().startswith("<!doctype html>")
    assert (tmp_path / "b.pftrace").read_bytes()[:1] == b"\x0a"


@pytest.mark.parametrize("flag", ["--annotate", "-o"])
def test_report_ranks_refuses_outputs_it_does_not_write(
    flag: str, example_trace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc = run_cli("report", "--ranks", example_trace, flag, out)
    _assert_one_line_error(proc, flag, "--ranks")
    assert not out.exists()
    assert proc.stdout == ""


def test_convert_onto_its_input_says_what_to_change(tmp_path: Path) -> None:
    src = tmp_path / "in.json.gz"
    shutil.copy(EXAMPLE, src)
    before = src.read_bytes()
    for out in (src, tmp_path / "sub" / ".." / "in.json.gz"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        proc = run_cli("convert", src, "-o", out)
        _assert_one_line_error(proc, "it is the input", "pick another -o")
        assert "pass -o" not in proc.stderr
    assert src.read_bytes() == before
