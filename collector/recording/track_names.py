"""The names of a recording's tracks as users read them: every source's process and thread
events pass through here on their way to the writer (collector/recording/trace.py).

- a thread the startup hook reported gets its Python name, whole (threading's name: the
  kernel's comm holds 15 bytes and CPython before 3.14 does not set it);
- a process gets the name of its role (collector/recording/process_roles.py), its program's
  name kept beside it.
Every source's events of a process or thread are renamed alike, so the last description
the writer gets is the same whichever source comes last.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import replace

from collector import model
from collector.recording.process_roles import numbered_roles, process_name, script_role
from collector.recording.python_names import ReportedNames


class TrackNames:
    """Renames ProcessInfo and ThreadInfo events from what the recording learned."""

    def __init__(self, reported: ReportedNames | None = None) -> None:
        reported = reported or ReportedNames({}, {})
        self._threads = reported.threads
        self._roles = numbered_roles(reported.processes)

    def apply(self, events: Iterable[model.Event]) -> Iterator[model.Event]:
        threads = self._threads
        for event in events:
            if isinstance(event, model.ThreadInfo):
                name = threads.get((event.pid, event.tid))
                if name is not None:
                    event = replace(event, name=name)
            elif isinstance(event, model.ProcessInfo):
                event = self._process(event)
            yield event

    def _process(self, process: model.ProcessInfo) -> model.ProcessInfo:
        role = self._roles.get(process.pid) or script_role(process.cmdline)
        name = process_name(process.name, role)
        return process if name == process.name else replace(process, name=name)
