"""Names from a trace never act on the user's terminal.

A kernel, a Python function, a process or a thread may be named with anything: a converted
Kineto file or a recorded program chooses them.  Printed raw, "\\x1b]0;pwned\\x07" retitles
the terminal, "\\x1b[2J" clears it, a carriage return hides what the line said, and a name
holding "[bold red]" was read by rich as markup.  Every text output for a person (report,
query's table, folded, convert's summary) shows such characters visibly (`\\x1b`) and
markup literally; the machine formats (query --format json|csv) stay exact.
"""

from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from collector import model
from collector.visible_text import printable, printable_lines, visible

from . import analysis_traces
from .conftest import REPO

# What may reach a terminal from the commands: text, newlines and tabs.
_ACTING = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

TITLE = "\x1b]0;pwned\x07"  # OSC: sets the terminal's title
CLEAR = "\x1b[2J"  # CSI: clears the screen
MARKUP = "[bold red]loud[/bold red]"
FUNC = f"augment{TITLE}"
KERNEL_TAIL = f"{CLEAR}{MARKUP}\r\x9b1m\u202e"
PROCESS = f"python3{TITLE}"
THREAD = f"main{CLEAR}{MARKUP}:thumbs_up:"  # rich would draw an emoji


def _run(*args: str | Path, columns: int = 220) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "XPU_PERF_NO_CACHE": "1"}
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
        check=False,
    )


def _hostile(event: model.Event) -> model.Event:
    if isinstance(event, model.GpuOp):
        return dataclasses.replace(event, name=event.name + KERNEL_TAIL)
    if isinstance(event, model.ProcessInfo):
        return dataclasses.replace(event, name=PROCESS)
    if isinstance(event, model.ThreadInfo):
        return dataclasses.replace(event, name=THREAD)
    return event


@pytest.fixture(scope="module")
def hostile_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The host-bound scenario (a finding naming the Python function between launches)
    with that function, every kernel, the process and the thread named with escapes."""
    path = tmp_path_factory.mktemp("hostile") / "hostile.perfetto-trace"
    mp = pytest.MonkeyPatch()
    loop = analysis_traces.LOOP
    mp.setattr(
        analysis_traces,
        "HOST_STACK",
        model.Stack(
            (
                *loop,
                model.Frame(f"{FUNC} (train.py:77)", analysis_traces.USER, 77),
                model.Frame("memmove", "/lib/libc.so.6"),
            )
        ),
    )
    finish = analysis_traces._finish

    def hostile_finish(path: Path, events: list, *rest: object) -> object:
        return finish(path, [_hostile(e) for e in events], *rest)  # type: ignore[arg-type]

    mp.setattr(analysis_traces, "_finish", hostile_finish)
    try:
        analysis_traces.write(path, "host")
    finally:
        mp.undo()
    return path


def _assert_inert(text: str) -> None:
    found = sorted({repr(c) for c in _ACTING.findall(text)})
    assert not found, found


def test_printable_shows_every_acting_character() -> None:
    assert printable(TITLE) == "\\x1b]0;pwned\\x07"
    assert printable("a\tb\nc\rd\x9be\u202ef") == "a\\x09b\\x0ac\\x0dd\\x9be\\u202ef"
    assert printable_lines("a\tb\nc\rd") == "a\tb\nc\\x0dd"
    kept = "é 漢字 \U0001f600 <&> [bold]"
    assert printable(kept) == kept == printable_lines(kept)
    # The page outputs' rules are unchanged (tab, newline, CR are legal XML).
    assert visible("a\tb\r\n\x1b") == "a\tb\r\n\\x1b"
    for c in map(chr, range(0x110000)):
        if 0xD800 <= ord(c) <= 0xDFFF:
            continue
        shown = printable(c)
        assert not _ACTING.search(shown) and printable(shown) == shown, repr(c)


def test_report_shows_names_visibly(hostile_trace: Path) -> None:
    proc = _run("report", hostile_trace)
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout)
    _assert_inert(proc.stderr)
    out = proc.stdout
    assert printable(FUNC) in out  # the finding's location, and the top functions
    assert printable(CLEAR + MARKUP) in out  # a kernel, its markup shown as text
    assert "PYTHON_BETWEEN_LAUNCHES" in out
    full = _run("report", hostile_trace, "--all")
    assert full.returncode == 0, full.stderr
    _assert_inert(full.stdout)
    assert MARKUP in full.stdout


def test_report_json_keeps_names_exact(hostile_trace: Path) -> None:
    proc = _run("report", hostile_trace, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout)  # JSON escapes controls itself
    findings = json.loads(proc.stdout)["findings"]
    assert f"{FUNC} (train.py:77)" in findings[0]["locations"]


def test_query_table_shows_names_visibly(hostile_trace: Path) -> None:
    sql = (
        "select distinct name from slice where name like 'gemm%' "
        "union all select name from thread where name is not null"
    )
    proc = _run("query", hostile_trace, sql)
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout)
    assert printable(f"gemm_fwd{KERNEL_TAIL}") in proc.stdout
    assert printable(THREAD) in proc.stdout


def test_query_json_and_csv_keep_names_exact(hostile_trace: Path) -> None:
    sql = (
        "select distinct name from slice where name = 'gemm_fwd' || char(27) || "
        "'[2J[bold red]loud[/bold red]' || char(13) || char(155) || '1m' || char(8238)"
    )
    proc = _run("query", hostile_trace, sql, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"name": f"gemm_fwd{KERNEL_TAIL}"}]
    raw = subprocess.run(
        [sys.executable, "-m", "collector.cli", "query", hostile_trace, sql, "--format", "csv"],
        capture_output=True,
        cwd=REPO,
        timeout=600,
        check=True,
    )
    rows = list(csv.reader(io.StringIO(raw.stdout.decode(), newline="")))
    assert rows == [["name"], [f"gemm_fwd{KERNEL_TAIL}"]]


def test_folded_to_stdout_shows_names_visibly(hostile_trace: Path) -> None:
    proc = _run("folded", hostile_trace)
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout)
    _assert_inert(proc.stderr)
    assert printable(FUNC).replace(";", ":") in proc.stdout  # folded's frame separator
    # Still one stack per line, `frames count`.
    assert all(re.fullmatch(r".+ \d+", line) for line in proc.stdout.splitlines())


def test_convert_summary_shows_input_names_visibly(tmp_path: Path) -> None:
    """The summary counts skipped events by the input's own category and phase."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 10, "dur": 5},
        {"ph": f"Q{TITLE}", "cat": "x", "name": "n", "pid": 1, "tid": 1, "ts": 11},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 20, "dur": 5},
        {"ph": "s", "cat": f"flow{CLEAR}{MARKUP}", "name": "n", "pid": 1, "tid": 1, "id": 3,
         "ts": 10},
        {"ph": "f", "cat": f"flow{CLEAR}{MARKUP}", "name": "n", "pid": 1, "tid": 1, "id": 3,
         "ts": 20, "bp": "e"},
    ]  # fmt: skip
    src = tmp_path / f"in[bold]{CLEAR}.json.gz"
    with gzip.open(src, "wt") as f:
        json.dump({"traceEvents": events}, f)
    out = tmp_path / "out[bold red]x.perfetto-trace"
    proc = _run("convert", src, "-o", out)
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout + proc.stderr)
    text = " ".join(proc.stderr.split())
    assert "out[bold red]x.perfetto-trace" in text, proc.stderr
    assert printable(f"Q{TITLE}")[:20] in text or "\\x1b]0;pwned" in text, proc.stderr
    assert printable(f"flow{CLEAR}{MARKUP}") in text, proc.stderr


def test_merge_summary_shows_input_paths_visibly(hostile_trace: Path, tmp_path: Path) -> None:
    """A file may be named with anything too; merge's summary lists each input's path."""
    inputs = []
    for name in (f"a{TITLE}.perfetto-trace", "b[bold red]loud:thumbs_up:.pftrace"):
        path = tmp_path / name
        path.write_bytes(hostile_trace.read_bytes())
        inputs.append(path)
    proc = _run("merge", "-o", tmp_path / "merged.perfetto-trace", *inputs)
    assert proc.returncode == 0, proc.stderr
    _assert_inert(proc.stdout + proc.stderr)
    text = " ".join(proc.stderr.split())
    assert printable(f"a{TITLE}.perfetto-trace") in text, proc.stderr
    assert "b[bold red]loud:thumbs_up:.pftrace" in text, proc.stderr
