"""A command's output files: checked together before any work, then each written whole
or not at all (collector/files.py)."""

from __future__ import annotations

import os
import sys
import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

from collector.files import FileError, check_output, same_file, write_text


def write_output(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file created exclusively beside it, so a
    failed or interrupted write never leaves a half-written file, nor writes through a
    planted link; errors become one line."""
    write_text(path, text)


def check_outputs(outputs: Mapping[str, Path | None], inputs: Iterable[Path] = ()) -> None:
    """Each output a command was given (its flag -> path; None where not given) can be
    written (`check_output`: never an input, a directory, nowhere writable), and no two
    reach one file, whatever the spelling (`..`, symlinks, hard links): one would replace
    the other and both be reported written."""
    given = [(flag, path) for flag, path in outputs.items() if path is not None]
    sources = list(inputs)
    for _, path in given:
        check_output(path, sources)
    for i, (flag, path) in enumerate(given):
        for other_flag, other in given[i + 1 :]:
            if os.path.realpath(path) == os.path.realpath(other) or same_file(path, other):
                raise FileError(
                    f"{flag} and {other_flag} name the same file ({path}): one would replace "
                    "the other; give each its own name"
                )


def say(text: str) -> None:
    """A command's message on stderr, wrapped at the terminal's width where it goes to one
    (COLUMNS, else stderr's terminal), its further lines indented; one line where stderr goes
    to a file or a pipe, so a log stays one line per message."""
    width = _terminal_width()
    if width is None:
        print(text, file=sys.stderr)
        return
    lines = textwrap.wrap(
        text, width, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False
    )
    print("\n".join(lines) or text, file=sys.stderr)


def _terminal_width() -> int | None:
    try:
        return max(40, int(os.environ["COLUMNS"]))
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.stderr.fileno()).columns if sys.stderr.isatty() else None
    except (OSError, ValueError):
        return None
