"""Writing a command's output file: whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

from collector.errors import UserError


def write_output(path: Path, text: str) -> None:
    """Write `text` to `path` through a `.tmp` beside it, so a failed or interrupted write
    never leaves a half-written file under the real name; errors become one line."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UserError(f"cannot write {path}: {exc.strerror}") from None
