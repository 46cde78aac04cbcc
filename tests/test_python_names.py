"""The Python startup hook (collector/recording/startup_hook/sitecustomize.py) run in real
interpreters, and the naming rules of collector/recording/process_roles.py on literal
reports (the DataLoader and inductor layouts among them: torch is not installed here).

The hook must never change what the program does: it chains to the sitecustomize it
shadows (whose errors Python reports as it would), loads no module Python had not loaded,
survives a names directory it cannot write, and stays out of -I / -E interpreters.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from collector import model
from collector.recording.kept_streams import CPU_STREAMS, PYTHON_NAMES, kept_sources
from collector.recording.process_roles import numbered_roles, process_name, script_role
from collector.recording.python_names import (
    HOOK_DIRECTORY,
    ProcessReport,
    PythonNames,
    ReportedNames,
    read_reports,
)
from collector.recording.track_names import TrackNames

from .test_cpu_sampler import python_interpreters

THREADS = textwrap.dedent(
    """
    import sys, threading
    def comm():
        with open("/proc/self/task/%d/comm" % threading.get_native_id()) as f:
            print(f.read().strip())
    t = threading.Thread(target=comm, name=sys.argv[1])
    t.start()
    t.join()
    """
)


def run_python(
    python: str, names: Path, *args: str, pythonpath: str = "", flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    path = os.pathsep.join(p for p in (str(HOOK_DIRECTORY), pythonpath) if p)
    env = {**os.environ, "PYTHONPATH": path, "XPU_PERF_NAMES_DIR": str(names)}
    return subprocess.run(
        [python, *flags, *args], env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("python", python_interpreters())
def test_thread_reports_its_whole_name_and_sets_comm(python: str, tmp_path: Path) -> None:
    name = "metrics-collector-€-long"
    proc = run_python(python, tmp_path, "-c", THREADS, name)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    # comm holds 15 bytes: the cut falls before the 3-byte euro sign, never inside it.
    assert proc.stdout.strip() == "metrics-collect"
    reported = read_reports(tmp_path)
    assert list(reported.threads.values()) == [name]


def test_chains_to_the_shadowed_sitecustomize(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("import os\nos.environ['USER_HOOK'] = 'ran'\n")
    code = "import os, sitecustomize; print(os.environ.get('USER_HOOK'), sitecustomize.__file__)"
    proc = run_python(sys.executable, tmp_path, "-c", code, pythonpath=str(user))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ran", str(user / "sitecustomize.py")]


def test_shadowed_sitecustomize_errors_are_reported_as_python_would(tmp_path: Path) -> None:
    user = tmp_path / "user"
    user.mkdir()
    (user / "sitecustomize.py").write_text("raise ValueError('boom')\n")
    proc = run_python(sys.executable, tmp_path, "-c", "print('ran')", pythonpath=str(user))
    assert proc.returncode == 0
    assert proc.stdout == "ran\n"
    assert "Error in sitecustomize; set PYTHONVERBOSE for traceback:\nValueError: boom" in (
        proc.stderr
    )


def test_loads_no_module_python_had_not(tmp_path: Path) -> None:
    code = "import sys; print(' '.join(sorted(sys.modules)))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    plain = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    hooked = run_python(sys.executable, tmp_path, "-c", code)
    added = set(hooked.stdout.split()) - set(plain.stdout.split()) - {"sitecustomize"}
    assert added == set()


def test_unwritable_directory_changes_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such" / "directory"
    proc = run_python(sys.executable, missing, "-c", THREADS, "metrics")
    assert proc.returncode == 0
    assert proc.stderr == ""


@pytest.mark.parametrize("flag", ["-I", "-E"])
def test_isolated_interpreters_are_left_alone(flag: str, tmp_path: Path) -> None:
    proc = run_python(sys.executable, tmp_path, "-c", THREADS, "metrics", flags=(flag,))
    assert proc.returncode == 0, proc.stderr
    assert read_reports(tmp_path).threads == {}


MULTIPROCESSING = textwrap.dedent(
    """
    import functools, multiprocessing, sys
    def crunch_numbers(initializer):
        pass
    def setup():
        pass
    if __name__ == "__main__":
        ctx = multiprocessing.get_context(sys.argv[1])
        p = ctx.Process(target=crunch_numbers, args=(functools.partial(setup),))
        p.start()
        p.join()
        q = ctx.Process(target=crunch_numbers, args=(None,), name="loader")
        q.start()
        q.join()
    """
)


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_process_reports_its_target(method: str, tmp_path: Path) -> None:
    script = tmp_path / "workers.py"
    script.write_text(MULTIPROCESSING)
    names = tmp_path / "names"
    names.mkdir()
    proc = run_python(sys.executable, names, str(script), method)
    assert proc.returncode == 0, proc.stderr
    reports = sorted(read_reports(names).processes.values(), key=lambda r: r.start_ns)
    assert [r.name.rsplit("-", 1)[0] for r in reports] == [
        {"fork": "ForkProcess", "spawn": "SpawnProcess", "forkserver": "ForkServerProcess"}[method],
        "loader",
    ]
    assert all(r.target.endswith(":crunch_numbers") for r in reports)
    assert reports[0].callable_modules in (("__main__",), ("__mp_main__",))
    assert numbered_roles({r.pid: r for r in reports}) == {
        reports[0].pid: "crunch_numbers",
        reports[1].pid: "loader",
    }


def report(pid: int, target: str, *modules: str, parent: int = 1, name: str = "") -> ProcessReport:
    return ProcessReport(pid, parent, pid * 10, name or f"ForkProcess-{pid}", target, modules)


def test_roles_from_what_the_process_runs() -> None:
    reports = {
        r.pid: r
        for r in (
            # DataLoader: its workers run _worker_loop; two of one loader, one of another parent.
            report(11, "torch.utils.data._utils.worker:_worker_loop", "torch.utils.data._utils"),
            report(12, "torch.utils.data._utils.worker:_worker_loop", "torch.utils.data._utils"),
            report(13, "torch.utils.data._utils.worker:_worker_loop", parent=2),
            # inductor's compile pool: the standard pool loop with inductor's initializer.
            report(
                21, "concurrent.futures.process:_process_worker", "torch._inductor.async_compile"
            ),
            report(22, "concurrent.futures.process:_process_worker", "__main__"),
            report(23, "multiprocessing.pool:worker", name="SpawnPoolWorker-3"),
            report(31, "__main__:crunch_numbers", "__main__"),
            # A program's own worker given a DataLoader helper is not a DataLoader worker.
            report(33, "__main__:collate_all", "torch.utils.data._utils.collate", parent=3),
            report(32, "__mp_main__:Trainer.run", name="trainer-7"),
        )
    }
    assert numbered_roles(reports) == {
        11: "DataLoader worker 0",
        12: "DataLoader worker 1",
        13: "DataLoader worker",
        21: "inductor compile worker",
        22: "process pool worker",
        23: "pool worker",
        31: "crunch_numbers",
        33: "collate_all",
        32: "trainer-7",
    }


def test_script_roles() -> None:
    main = "/venv/lib/python3.11/site-packages/torch/_inductor/compile_worker/__main__.py"
    assert script_role(["/venv/bin/python3.11", main, "--workers=4"]) == "inductor compile worker"
    assert script_role(["python", "-u", "-m", "torch._inductor.compile_worker"]) == (
        "inductor compile worker"
    )
    assert script_role(["python3", "train.py"]) is None
    assert script_role(["bash", main]) is None


def test_names_keep_the_programs_own() -> None:
    assert process_name("python3", "DataLoader worker 0") == "DataLoader worker 0 (python3)"
    assert process_name("python3", None) == "python3"


def test_track_names_rename_every_source_alike() -> None:
    reported = ReportedNames(
        {(5, 6): "metrics-collector"}, {7: report(7, "__main__:crunch_numbers", parent=5)}
    )
    names = TrackNames(reported)
    events = [
        model.ProcessInfo(5, "python3"),
        model.ThreadInfo(5, 6, "metrics-collec"),
        model.ThreadInfo(5, 5, "python3"),
        model.ProcessInfo(7, "python3", ("python3", "x.py")),
    ]
    assert list(names.apply(events)) == [
        model.ProcessInfo(5, "python3"),
        model.ThreadInfo(5, 6, "metrics-collector"),
        model.ThreadInfo(5, 5, "python3"),
        model.ProcessInfo(7, "crunch_numbers (python3)", ("python3", "x.py")),
    ]


def test_kept_recording_keeps_the_names(tmp_path: Path) -> None:
    """`record --from-streams`: the names the hook wrote beside the kept streams are read."""
    (tmp_path / CPU_STREAMS).mkdir()
    (tmp_path / PYTHON_NAMES).mkdir()
    (tmp_path / PYTHON_NAMES / "names-5.tsv").write_text("T\t6\tmetrics-collector\nbroken\n")
    sources = kept_sources(tmp_path)
    names = [s for s in sources if isinstance(s, PythonNames)]
    assert len(names) == 1 and names[0].target_env() == {}
    assert names[0].reported().threads == {(5, 6): "metrics-collector"}
