"""Shared by tests/test_bpf_*.py: build the native programs, record them with the real bcc
sources and trace writer, and read the result back through trace_processor SQL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

REPO = Path(__file__).resolve().parents[2]

# CPU timer samples vs launch stacks: the writer puts them on perf sample sequences whose
# timebase counters are named `cpu-clock` and `xpu_perf.launch_stack`.
CPU_SAMPLES_SQL = """
select s.id, s.ts, s.callsite_id, t.tid, t.upid
from perf_sample s
join thread t using (utid)
where s.perf_session_id in (
  select perf_session_id from perf_counter_track where name = 'cpu-clock'
)
"""

# Folded-style aggregation: for each function, in how many CPU samples it is on the stack.
SAMPLES_PER_FUNCTION_SQL = f"""
with recursive
  samples as ({CPU_SAMPLES_SQL}),
  chain(sample_id, callsite_id) as (
    select id, callsite_id from samples
    union all
    select chain.sample_id, c.parent_id
    from chain join stack_profile_callsite c on c.id = chain.callsite_id
    where c.parent_id is not null
  )
select f.name as function, count(distinct chain.sample_id) as samples
from chain
join stack_profile_callsite c on c.id = chain.callsite_id
join stack_profile_frame f on f.id = c.frame_id
group by f.name
"""

STATS_ERRORS_SQL = (
    "select name, idx, severity, value from stats "
    "where severity in ('error', 'data_loss') and value > 0"
)


def bpf_unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "eBPF tests need root"
    try:
        import bcc  # noqa: F401
    except ImportError:
        return "bcc not importable: run scripts/setup_bcc.sh"
    return None


requires_bpf = pytest.mark.skipif(
    bpf_unavailable_reason() is not None, reason=str(bpf_unavailable_reason())
)


def record_cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "collector.recording.bcc_record", "-o", str(out), *args]


def record(out: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the standalone recorder; `args` are its flags, `--`, and the command."""
    proc = subprocess.run(
        record_cmd(out, *args), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    return proc


def query(trace: Path, sql: str) -> list[dict[str, Any]]:
    """Rows of `sql`, which may use the shared views (exporters/perfetto/engine/xpu_views.sql)."""
    with open_trace(trace) as tp:
        load_views(tp)
        return tp.query(sql)


def metadata(trace: Path) -> dict[str, Any]:
    """The run's counters (TraceWriter.set_metadata), keyed without the `debug.` prefix."""
    rows = query(
        trace,
        "select a.key, coalesce(a.int_value, a.string_value, a.real_value) as value "
        "from slice s join args a using (arg_set_id) where s.category = 'xpu_perf_metadata'",
    )
    return {r["key"].removeprefix("debug."): r["value"] for r in rows}
