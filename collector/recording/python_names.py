"""The names the recorded program's Python knows and the kernel does not: thread names from
`threading`, and what each multiprocessing process runs.

The startup hook (collector/recording/startup_hook/sitecustomize.py, first on the target's
PYTHONPATH) appends them to names-PID.tsv in this source's directory as the threads and
processes start; after the run they are read back here, and the recording puts them on the
tracks (collector/recording/track_names.py).  The hook reaches every Python of the tree that
inherits the environment; not one run with -I, -E or -S (PYTHONPATH or site ignored).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from collector import model
from collector.owned_files import RejectedFile, read_owned
from collector.recording.credentials import share_with_target
from collector.recording.libraries import loadable_directory_by_target

HOOK_DIRECTORY = Path(__file__).resolve().parent / "startup_hook"
NAMES_GLOB = "names-*.tsv"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """record's options for the Python in the target: its frames in stacks, its names."""
    parser.add_argument(
        "--no-python", action="store_true", help="stacks (launch and CPU) without Python frames"
    )
    parser.add_argument(
        "--no-python-names",
        action="store_true",
        help="leave the target's PYTHONPATH alone: no startup hook, so Python threads and "
        "worker processes keep the kernel's names (python3)",
    )


@dataclass(frozen=True, slots=True)
class ProcessReport:
    """What a multiprocessing process said of itself as it started (the hook's `P` line)."""

    pid: int
    parent: int
    start_ns: int
    name: str  # multiprocessing's name of it (`ForkProcess-1`, or the program's own)
    target: str  # MODULE:QUALNAME of the function it runs
    callable_modules: tuple[str, ...]  # modules of the callables among the target's arguments


@dataclass
class ReportedNames:
    """Everything the hook reported: thread names by (pid, tid), process reports by pid."""

    threads: dict[tuple[int, int], str]
    processes: dict[int, ProcessReport]


def read_reports(directory: Path) -> ReportedNames:
    """The hook's files of `directory`; a line that does not parse is skipped (a process
    killed mid-write), a later line of a thread or process wins (a reused tid)."""
    names = ReportedNames({}, {})
    for path in sorted(directory.glob(NAMES_GLOB)):
        try:
            pid = int(path.name.removeprefix("names-").removesuffix(".tsv"))
            # The target's user writes here: only a regular file of that user's is read.
            lines = read_owned(path).decode("utf-8", errors="replace").splitlines()
        except RejectedFile as exc:
            print(f"xpu-perf: rejected {exc} (not read: not a name file the target wrote)",
                  file=sys.stderr)  # fmt: skip
            continue
        except (OSError, ValueError):
            continue
        for line in lines:
            fields = line.split("\t")
            with contextlib.suppress(ValueError, IndexError):
                if fields[0] == "T" and len(fields) == 3 and fields[2]:
                    names.threads[(pid, int(fields[1]))] = fields[2]
                elif fields[0] == "P" and len(fields) == 6:
                    names.processes[pid] = ProcessReport(
                        pid,
                        int(fields[1]),
                        int(fields[2]),
                        fields[3],
                        fields[4],
                        tuple(m for m in fields[5].split(",") if m),
                    )
    return names


class PythonNames:
    """A RecordSource with no events of its own: the hook's environment for the target, and
    after the run the names it reported (`reported()`), which record applies to every
    source's tracks."""

    name = "python_names"

    def __init__(self, directory: Path | None = None, hook: bool = True) -> None:
        """directory: where the hook writes (record's kept_streams.StreamsDir subdirectory,
        kept with the streams); by default a temporary one this source removes.  hook: False
        for a finished recording's kept names (nothing to run)."""
        self._owns_directory = directory is None
        self.directory = directory or Path(tempfile.mkdtemp(prefix="xpu-perf-names-"))
        if self._owns_directory:
            share_with_target(self.directory)
        self.hook = hook
        self._reported: ReportedNames | None = None

    def target_env(self) -> Mapping[str, str]:
        if not self.hook:
            return {}
        # Ahead of the user's own path: Python imports the first sitecustomize it finds, and
        # the hook runs the one it shadows.
        hook = str(loadable_directory_by_target(HOOK_DIRECTORY))
        users = os.environ.get("PYTHONPATH")
        return {
            "PYTHONPATH": f"{hook}{os.pathsep}{users}" if users else hook,
            "XPU_PERF_NAMES_DIR": str(self.directory),
        }

    def start(self) -> None:
        pass

    def target_started(self, pid: int) -> None:
        pass

    def stop(self) -> None:
        pass

    def reported(self) -> ReportedNames:
        """The names the hook reported (read once, after the target is done)."""
        if self._reported is None:
            self._reported = read_reports(self.directory)
            if self._owns_directory:
                shutil.rmtree(self.directory, ignore_errors=True)
        return self._reported

    def events(self) -> Iterable[model.Event]:
        return ()

    def stats(self) -> Mapping[str, int]:
        reported = self.reported()
        return {"threads": len(reported.threads), "processes": len(reported.processes)}
