"""Writing a command's text output file: whole or not at all (collector/files.py)."""

from __future__ import annotations

from pathlib import Path

from collector.files import write_text


def write_output(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file created exclusively beside it, so a
    failed or interrupted write never leaves a half-written file, nor writes through a
    planted link; errors become one line."""
    write_text(path, text)
