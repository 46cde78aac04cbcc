"""What the trace says about the machine it was recorded on: its host and the CPUs the
program could use (`cpu_count`), which the input-pipeline finding needs to tell "raise
num_workers" from "no spare CPUs" (without it the CPUs the samples landed on were counted,
a lower bound: 2 busy workers on a 16-CPU machine read as no room for a third)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from collector.errors import UserError
from collector.recording.kept_streams import MANIFEST, Manifest, load_manifest
from collector.recording.trace import write_trace
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views


def _cpu_count(trace: Path) -> int | None:
    with open_trace(trace) as t:
        load_views(t)
        return t.scalar("select int_value from xpu_metadata where key = 'cpu_count'")


def test_live_recording_says_the_cpus_the_program_could_use(tmp_path: Path) -> None:
    out = tmp_path / "live.perfetto-trace"
    write_trace(out, [], ["prog"])
    assert _cpu_count(out) == len(os.sched_getaffinity(0))


def test_kept_recording_says_the_recording_machines_cpus(tmp_path: Path) -> None:
    """Written later, maybe elsewhere: the count the manifest kept, not this machine's."""
    out = tmp_path / "later.perfetto-trace"
    write_trace(
        out, [], ["prog"], kept=Manifest(["prog"], cpu_count=len(os.sched_getaffinity(0)) + 5)
    )
    assert _cpu_count(out) == len(os.sched_getaffinity(0)) + 5


def test_manifest_without_cpu_count_leaves_it_unknown(tmp_path: Path) -> None:
    out = tmp_path / "old.perfetto-trace"
    write_trace(out, [], ["prog"], kept=Manifest(["prog"]))
    assert _cpu_count(out) is None


@pytest.mark.parametrize("bad", ["16", -1, 0, True, 1 << 40])
def test_manifest_cpu_count_is_checked(tmp_path: Path, bad: object) -> None:
    raw = {"command_line": ["prog"], "version": 1, "cpu_count": bad}
    (tmp_path / MANIFEST).write_text(json.dumps(raw))
    with pytest.raises(UserError, match="cpu_count"):
        load_manifest(tmp_path)


def test_manifest_cpu_count_round_trips(tmp_path: Path) -> None:
    raw = {"command_line": ["prog"], "version": 1, "cpu_count": 12}
    (tmp_path / MANIFEST).write_text(json.dumps(raw))
    assert load_manifest(tmp_path).cpu_count == 12
