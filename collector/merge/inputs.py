"""The inputs of a merge, read before anything is written: each trace's framing checked end
to end, its clock snapshot, its metadata (host, rank facts) and the label that tells its
processes and GPUs apart in the merged trace."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from collector.errors import UserError
from collector.files import check_input
from exporters.perfetto.packet_reader import TraceFileError, TraceHead, scan_head


@dataclass(frozen=True)
class InputTrace:
    index: int
    path: Path
    head: TraceHead
    host: str | None  # from the trace's metadata (`record`; `convert` where Kineto has it)
    label: str  # host, or the file name without suffix; unique among the inputs


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".perfetto-trace", ".pftrace"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def read_inputs(paths: list[Path]) -> list[InputTrace]:
    """Every input's head; the first unreadable one is a UserError (nothing written yet)."""
    heads: list[TraceHead] = []
    for path in paths:
        check_input(path)  # a directory, a FIFO, an unreadable file: one line, no hang
        try:
            heads.append(scan_head(path))
        except TraceFileError as exc:
            raise UserError(str(exc)) from None
    hosts = [h.metadata.get("host") for h in heads]
    labels = [str(host) if host else _stem(p) for host, p in zip(hosts, paths, strict=True)]
    # Two traces of one host (two `record` runs on one machine, one rank each) keep apart
    # by their file names.
    repeated = {label for label, n in Counter(labels).items() if n > 1}
    labels = [
        f"{label}:{_stem(p)}" if label in repeated else label
        for label, p in zip(labels, paths, strict=True)
    ]
    if len(set(labels)) < len(labels):
        labels = [f"{label}#{i}" for i, label in enumerate(labels)]
    return [
        InputTrace(i, path, head, str(host) if host else None, label)
        for i, (path, head, host, label) in enumerate(zip(paths, heads, hosts, labels, strict=True))
    ]
