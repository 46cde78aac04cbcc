"""Thread and process names as users read them in the Perfetto UI (the thread and process
tables), on real recordings with both CPU samplers:

- a Python thread started as threading.Thread(name=...) is named so, whole (beyond the 15
  bytes of a Linux thread name), on CPython versions that do not name the OS thread;
- a forked multiprocessing worker is named after its target function, the interpreter's
  name kept beside it: `crunch_numbers (python3)`;
- a program started through `sh -c '...; exec python3 ...'` reads python3, its process and
  its main thread, not sh.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from .conftest import REPO, run_cli
from .native.bpf_harness import bpf_unavailable_reason
from .test_cpu_sampler import FREQ

SCRIPT = REPO / "tests" / "native" / "named_workers.py"
SECONDS = "1"
PYTHON = "/usr/bin/python3"

SAMPLERS = [
    pytest.param("inprocess", id="inprocess"),
    pytest.param(
        "ebpf",
        id="ebpf",
        marks=pytest.mark.skipif(
            bpf_unavailable_reason() is not None, reason=str(bpf_unavailable_reason())
        ),
    ),
]

NAMES_SQL = """
select p.pid, p.name as process, t.tid, t.name as thread,
  (select count(*) from perf_sample s where s.utid = t.utid) as samples
from thread t left join process p using (upid)
where p.pid is not null and p.pid != 0
"""


def names(trace: Path) -> list[dict[str, object]]:
    with open_trace(trace) as tp:
        return list(tp.query(NAMES_SQL))


def record(sampler: str, out: Path, *cmd: str) -> list[dict[str, object]]:
    proc = run_cli(
        "record", "--no-gpu", "--cpu-sampler", sampler, "--freq", FREQ, "-o", out, "--", *cmd
    )
    assert proc.returncode == 0, proc.stderr
    return names(out)


@pytest.fixture(scope="module", params=SAMPLERS)
def workers_trace(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, list[dict[str, object]]]:
    out = tmp_path_factory.mktemp("names") / "workers.perfetto-trace"
    return request.param, record(request.param, out, PYTHON, str(SCRIPT), SECONDS)


def test_python_thread_has_its_threading_name(
    workers_trace: tuple[str, list[dict[str, object]]],
) -> None:
    _, rows = workers_trace
    named = [r for r in rows if r["thread"] == "metrics-collector"]
    assert named, rows
    assert all(r["samples"] for r in named), rows
    # The main thread keeps the program's name.
    assert any(r["tid"] == r["pid"] and r["thread"] == "python3" for r in rows), rows


def test_multiprocessing_worker_named_after_its_target(
    workers_trace: tuple[str, list[dict[str, object]]],
) -> None:
    _, rows = workers_trace
    processes = {r["pid"]: r["process"] for r in rows}
    assert "crunch_numbers (python3)" in processes.values(), rows
    # The parent is not renamed.
    assert sum(name == "python3" for name in processes.values()) == 1, rows


@pytest.mark.parametrize(
    "program",
    [
        # The program's main thread only waits (its threads work), after its startup.
        pytest.param((PYTHON, str(SCRIPT), "0.5"), id="python3"),
        # Never sampled after the exec: nothing of the new image renames the thread.
        pytest.param(("/bin/sleep", "0.3"), id="sleep"),
    ],
)
@pytest.mark.parametrize("sampler", [p.values[0] for p in SAMPLERS], ids=["inprocess", "ebpf"])
def test_exec_through_a_shell_reads_the_new_program(
    sampler: str, program: tuple[str, ...], tmp_path: Path
) -> None:
    if sampler == "ebpf" and bpf_unavailable_reason() is not None:
        pytest.skip(str(bpf_unavailable_reason()))
    # The shell is busy before the exec: its own image is sampled.
    busy = "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"
    command = f"{busy}; exec {' '.join(program)}"
    rows = record(sampler, tmp_path / "sh.perfetto-trace", "sh", "-c", command)
    assert any(r["samples"] for r in rows), rows
    pid = min(int(r["pid"]) for r in rows)  # the shell's pid, kept by the exec
    name = Path(program[0]).name
    main = [r for r in rows if r["tid"] == pid]
    assert main and all(r["thread"] == name for r in main), rows
    assert {r["process"] for r in rows if r["pid"] == pid} == {name}, rows


def test_no_python_names_leaves_the_target_alone(tmp_path: Path) -> None:
    out = tmp_path / "plain.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "--no-python-names", "-o", out, "--",
        PYTHON, "-c", "import os, sys; sys.exit('startup_hook' in os.environ.get('PYTHONPATH', '')"
        " or 'XPU_PERF_NAMES_DIR' in os.environ)",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


# torch for the target (not installed here by default): a directory holding it, or the
# target Python's own site-packages.
TORCH_PATH = os.environ.get("XPU_PERF_TEST_TORCH_PATH", "")


def _torch_missing() -> bool:
    env = {**os.environ, "PYTHONPATH": TORCH_PATH}
    probe = subprocess.run([PYTHON, "-c", "import torch"], env=env, capture_output=True)
    return probe.returncode != 0


@pytest.mark.skipif(_torch_missing(), reason="no torch for the target (XPU_PERF_TEST_TORCH_PATH)")
@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ("loader-cpu", {"DataLoader worker 0", "DataLoader worker 2"}),
        (
            "pool-cpu",
            {
                "inductor compile worker",  # the pool's process (its script)
                "inductor compile worker 0",  # its forked workers
                "inductor compile worker 1",
            },
        ),
    ],
)
@pytest.mark.parametrize("sampler", [p.values[0] for p in SAMPLERS], ids=["inprocess", "ebpf"])
def test_torch_workers_named_by_what_they_are(
    sampler: str, workload: str, expected: set[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real DataLoader and inductor worker layouts, where torch is there.  The program's
    name in parentheses is the sampler's: the command's (in-process) or comm (eBPF: torch
    names its DataLoader workers `pt_data_worker`)."""
    if sampler == "ebpf" and bpf_unavailable_reason() is not None:
        pytest.skip(str(bpf_unavailable_reason()))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (TORCH_PATH, str(REPO)) if p))
    monkeypatch.setenv("TORCHINDUCTOR_COMPILE_THREADS", "2")
    out = tmp_path / "torch.perfetto-trace"
    rows = record(sampler, out, PYTHON, "-m", "bench.workloads.worker_processes", workload)
    roles = {str(r["process"]).rpartition(" (")[0] for r in rows}
    assert expected <= roles, rows
