"""What `record` asks of a source: the protocols the recording is written against.

Every source (the GPU recording, the CPU samplers, the eBPF launch probes) is started before
the target and stopped after it, then writes its events through a producer of its own; the
optional protocols mark what only some sources can do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from collector import model
from collector.window_control import WindowState

if TYPE_CHECKING:
    from collector.symbolize import ElfFiles, Symbolizer


class SharedSymbols:
    """One cache of ELF symbol tables for a recording's sources (the launch stacks and the CPU
    samples name frames in the same libraries: libtorch's tables were read twice), made when
    the first of them reads its streams (nothing of it before the target starts)."""

    def __init__(self) -> None:
        self._files: ElfFiles | None = None

    def symbolizer(self) -> Symbolizer:
        from collector.symbolize import ElfFiles, Symbolizer

        if self._files is None:
            self._files = ElfFiles()
        return Symbolizer(self._files)


class RecordSource(Protocol):
    """What `record` needs from a source: environment for the target, a start before it, a
    stop after it, then its events and counters (written as metadata `<name>_<counter>`)."""

    @property
    def name(self) -> str: ...

    def target_env(self) -> Mapping[str, str]: ...
    def start(self) -> None: ...
    def target_started(self, pid: int) -> None: ...
    def stop(self) -> None: ...
    def events(self) -> Iterable[model.Event]: ...
    def stats(self) -> Mapping[str, int]: ...


class FinishedRun:
    """The run-time half of RecordSource for a source over what a finished recording kept
    (`record --from-streams`): no target to prepare, nothing to start or stop."""

    def target_env(self) -> Mapping[str, str]:
        return {}

    def start(self) -> None:
        pass

    def target_started(self, pid: int) -> None:
        pass

    def stop(self) -> None:
        pass


@runtime_checkable
class WindowedSource(Protocol):
    """A source that recorded capture windows (the GPU source under --capture-range/--delay)."""

    def windows(self) -> Sequence[model.CaptureWindow]: ...


@runtime_checkable
class WindowFollower(Protocol):
    """A source that samples only inside the recording's capture windows, following the
    control page from record's side while the target runs (the eBPF samplers: their BPF
    program is paused), then keeping only the samples inside the windows the trace writes
    (the pause follows the page within a drain round; write_trace says which windows)."""

    def follow_windows(self, windows: WindowState) -> None: ...
    def keep_only(self, windows: Sequence[model.CaptureWindow]) -> None: ...


@runtime_checkable
class DescribedSource(Protocol):
    """A source with facts beyond counts (the GPU counters: which source ran, why a better
    one was refused): metadata keys of their own, and lines for the summary."""

    def metadata(self) -> Mapping[str, model.ArgValue]: ...
    def summary_lines(self) -> list[str]: ...


@runtime_checkable
class SizedSource(Protocol):
    """A source whose target writes files while it runs (--max-size measures them)."""

    def recorded_bytes(self) -> int: ...


@runtime_checkable
class ProcessAccounting(Protocol):
    """A source whose processes each write a stream of their own (the libraries in the
    target): which processes ended without their final data (killed), and which of the
    target's tree wrote none at all (the library was not loaded), each as 'pid N (name)'."""

    def processes_without_final_data(self) -> Sequence[str]: ...
    def processes_not_recorded(self) -> Sequence[str]: ...


@runtime_checkable
class NotedSource(Protocol):
    """A source with text to say beyond its counters: metadata `<name>_<key>` and lines of
    the summary (the GPU source: the program's own profiler, another tool's injection)."""

    def notes(self) -> Mapping[str, str]: ...
    def summary_lines(self) -> Sequence[str]: ...


def process_accounts(sources: Sequence[RecordSource]) -> dict[str, dict[str, list[str]]]:
    """Per source name: `without_final_data` and `not_recorded` processes (after `events()`),
    for the summary and the metadata `<source>_processes_<which>`."""
    return {
        source.name: {
            "without_final_data": list(source.processes_without_final_data()),
            "not_recorded": list(source.processes_not_recorded()),
        }
        for source in sources
        if isinstance(source, ProcessAccounting)
    }
