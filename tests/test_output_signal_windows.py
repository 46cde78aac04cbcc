"""A signal that lands just after an output's temporary file was made leaves no file.

`convert` stopped by SIGTERM the moment its temporary trace appeared left
`.big.pftrace.XXXX.tmp` behind once in three CI runs (tests/faults/test_outputs.py): the
signal's exception came out of the code between the file's creation and the cleanup that
owns it.  Here the exception is raised at those points by hand, each time."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from collector import files
from exporters.perfetto import writer as writer_module
from exporters.perfetto.writer import TraceWriter


def test_interrupted_right_after_the_temporary_file_is_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal arrives as the file exists but before its descriptor is returned."""
    real_open = os.open

    def open_then_interrupted(path: str, flags: int, mode: int = 0o777) -> int:
        real_open(path, flags, mode)
        raise KeyboardInterrupt

    monkeypatch.setattr(files.os, "open", open_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        files.OutputFile(tmp_path / "out.pftrace")
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []


def test_output_file_names_are_exclusive_and_never_planted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each temporary name is new, made with O_EXCL and O_NOFOLLOW: a name planted beside the
    output, a symlink included, is never opened."""
    made = [files.OutputFile(tmp_path / "out.bin") for _ in range(20)]
    try:
        assert len({m.tmp_path for m in made}) == 20
        for m in made:
            assert m.tmp_path.parent == tmp_path and m.tmp_path.name.startswith(".out.bin.")
            assert m.tmp_path.name.endswith(".tmp")
            assert (m.tmp_path.stat().st_mode & 0o777) == 0o666 & ~files._umask()
    finally:
        for m in made:
            m.discard()
    assert list(tmp_path.iterdir()) == []
    # Every name tried is taken by a planted symlink: none is followed, none removed.
    planted, target = tmp_path / ".out.bin.planted.tmp", tmp_path / "elsewhere"
    planted.symlink_to(target)
    monkeypatch.setattr(files, "_temporary_name", lambda path: planted)
    with pytest.raises(FileExistsError):
        files.OutputFile(tmp_path / "out.bin")
    assert planted.is_symlink() and not target.exists()


def test_trace_writer_interrupted_while_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The signal arrives after the writer's file exists, while it sets up what it writes."""

    def interrupted(*_args: object, **_kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(writer_module, "TraceState", interrupted)
    with pytest.raises(KeyboardInterrupt):
        TraceWriter(tmp_path / "t.pftrace")
    assert list(tmp_path.iterdir()) == []
