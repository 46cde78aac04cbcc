"""Issue 21, a full disk (a small tmpfs, mounted by the test as root, filled up): one line,
nothing half-written left, and `record` keeps its recording and says how to write it."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

from exporters.perfetto.engine.trace_processor import open_trace
from tests.fake_cupti.build import FakeCupti

from ..conftest import EXAMPLE, REPO
from .support import assert_one_line_error, cli, entries


def test_convert_onto_a_full_disk(full_disk: Path) -> None:
    proc = cli("convert", EXAMPLE, "-o", full_disk / "x.pftrace")
    assert_one_line_error(proc, "no space left")
    assert entries(full_disk) == ["filler"]


def test_merge_onto_a_full_disk(example_trace: Path, full_disk: Path) -> None:
    proc = cli("merge", example_trace, "-o", full_disk / "m.pftrace")
    assert_one_line_error(proc, "no space left")
    assert entries(full_disk) == ["filler"]


def test_query_into_a_full_stdout(example_trace: Path) -> None:
    with open("/dev/full", "w") as full:  # every write: ENOSPC
        proc = subprocess.run(
            [sys.executable, "-m", "collector.cli", "query", example_trace,
             "select name from slice limit 2000", "--format", "csv"],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=REPO, timeout=300,
        )  # fmt: skip
    proc.stdout = ""
    assert_one_line_error(proc, "no space left")


def test_record_onto_a_full_disk_keeps_the_recording(
    fake: FakeCupti, full_disk: Path, run_tmpdir: Path, tmp_path: Path
) -> None:
    """The trace cannot be written: the target's status, the streams kept, one line with
    the command that writes the trace later; that command works."""
    out = full_disk / "rec.pftrace"
    env = {
        "XPU_PERF_INJECT_LIB": str(fake.injection),
        "FAKE_CUPTI_RECORDS_PER_BUFFER": "64",
        "TMPDIR": str(run_tmpdir),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "-q", "-o", out, "--",
         "sh", "-c", '"$0" 40 0; exit 5', fake.app],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 5, proc.stderr  # the target's status, not record's failure
    assert "Traceback" not in proc.stderr
    assert entries(full_disk) == ["filler"]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "No space left on device" in lines[0], proc.stderr
    match = re.search(r"xpu-perf record --from-streams (\S+) -o (\S+)$", lines[0])
    assert match is not None, lines[0]
    kept = Path(match[1])
    assert match[2] == str(out)
    assert kept.parent == run_tmpdir and any(kept.glob("cupti/*.xpstream"))
    # Room again: the printed command, with the output somewhere that has it.
    later = tmp_path / "later.pftrace"
    written = cli("record", "--from-streams", kept, "-o", later, env={"TMPDIR": str(run_tmpdir)})
    assert written.returncode == 0, written.stderr
    assert not kept.exists() and entries(run_tmpdir) == []
    # The same run recorded where there is room: the same GPU work in the trace.
    direct = tmp_path / "direct.pftrace"
    again = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "-q", "-o", direct, "--",
         "sh", "-c", '"$0" 40 0; exit 5', fake.app],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=300,
    )  # fmt: skip
    assert again.returncode == 5, again.stderr
    # (Blocked calls over the threshold depend on the run's timing, as samples do.)
    counts = (
        "select category, count(*) as n from slice where category != 'wait' group by 1 order by 1"
    )
    with open_trace(direct) as trace:
        expected = trace.query(counts)
    with open_trace(later) as trace:
        assert trace.query(counts) == expected
        assert trace.scalar("select count(*) from slice where category = 'kernel'") > 0
        command = trace.scalar("select display_value from args where key = 'debug.command_line'")
        host = trace.scalar("select display_value from args where key = 'debug.host'")
    assert command == f'xpu-perf record -- sh -c "$0" 40 0; exit 5 {fake.app}'
    assert host == socket.gethostname()
    shutil.rmtree(kept, ignore_errors=True)
