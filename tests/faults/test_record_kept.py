"""Issue 34 L6/W1: `record --from-streams DIR` on a kept recording that was damaged: a
manifest with a field of the wrong kind is refused in one line (it printed "at x Hz" and
wrote a trace), and a directory some of whose streams could not be read is kept (it was
deleted with them).  The kept recordings are real: a record whose trace could not be
written (a full disk)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from ..conftest import REPO
from .support import assert_one_line_error, cli, entries

BUSY = "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done"


@pytest.fixture
def kept(full_disk: Path, run_tmpdir: Path) -> Path:
    """A kept recording: CPU streams of two processes, the trace refused by a full disk."""
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "--no-kernel-stacks",
         "-q", "-o", full_disk / "rec.pftrace", "--", "sh", "-c", f"{BUSY}; sh -c '{BUSY}'"],
        capture_output=True, text=True, cwd=REPO,
        env={**os.environ, "TMPDIR": str(run_tmpdir)}, timeout=120,
    )  # fmt: skip
    match = re.search(r"--from-streams (\S+) -o", proc.stderr)
    assert match is not None, proc.stderr
    return Path(match[1])


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("freq", "x", "freq"),
        ("freq", -5, "freq"),
        ("freq", True, "freq"),
        ("command_line", "xpu-perf record", "command_line"),
        ("command_line", ["ok", 3], "command_line"),
        ("host", ["node1"], "host"),
        ("metadata", {"max_size_bytes": "big"}, "metadata"),
        ("windows", [{"pid": 1}], "windows"),
        ("surprise", 1, "unknown field"),
    ],
)
def test_a_bad_manifest_is_one_line_and_the_recording_stays(
    kept: Path, tmp_path: Path, field: str, value: object, said: str
) -> None:
    manifest = kept / "manifest.json"
    raw = json.loads(manifest.read_text())
    raw[field] = value
    manifest.write_text(json.dumps(raw))
    before = sorted(str(p.relative_to(kept)) for p in kept.rglob("*"))
    out = tmp_path / "later.pftrace"
    proc = cli("record", "--from-streams", kept, "-o", out)
    assert_one_line_error(proc, said, "manifest")
    assert "wrote /" not in proc.stderr and "cpu samples" not in proc.stderr  # no summary
    assert not out.exists()
    assert sorted(str(p.relative_to(kept)) for p in kept.rglob("*")) == before


def test_a_recording_with_unreadable_streams_is_kept(
    kept: Path, tmp_path: Path, run_tmpdir: Path
) -> None:
    """One stream overwritten with garbage: the trace has the other process's samples, the
    line says which could not be read, and the directory stays."""
    streams = sorted((kept / "cpu").glob("*.xpstream"))
    assert len(streams) == 2, streams
    streams[0].write_bytes(b"this is not a stream" * 10)
    out = tmp_path / "later.pftrace"
    proc = cli("record", "--from-streams", kept, "-o", out, env={"TMPDIR": str(run_tmpdir)})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"skipping {streams[0].name}" in proc.stderr
    assert re.search(
        rf"{re.escape(str(kept))} is kept: 1 cpu streams could not be read", proc.stderr
    )
    assert kept.is_dir() and streams[1].is_file()
    with open_trace(out) as trace:
        assert trace.scalar("select count(*) from perf_sample") > 0
        assert trace.scalar("select int_value from args where key = 'debug.cpu_streams'") == 1
    # The one that could be read is not lost either way; fixed, the directory goes.
    streams[0].unlink()
    again = cli("record", "--from-streams", kept, "-o", tmp_path / "again.pftrace")
    assert again.returncode == 0, again.stderr
    assert not kept.exists() and entries(run_tmpdir) == []
