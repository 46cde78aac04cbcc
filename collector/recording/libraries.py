"""Where the native libraries the target loads (and the Python startup hook it imports) come
from during a run.

As root, the libraries are loaded from a copy in a directory of the run that every user can
read and only root can write (0755, root's: what collector/cache_trust.py asks of code it
loads): a process of the tree that becomes another user (sudo's user, `setpriv`, `runuser`,
`su`) cannot read root's cache under a 0700 home, and ld.so would refuse the preload (or
libcuda the injection library) without a word in the trace.  The directory goes with record.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from collector.errors import UserError
from collector.files import remove_tree_at_exit

_run_directory: Path | None = None


def _directory() -> Path:
    global _run_directory
    if _run_directory is None:
        _run_directory = Path(tempfile.mkdtemp(prefix="xpu-perf-lib-"))
        _run_directory.chmod(0o755)
        remove_tree_at_exit(_run_directory)
    return _run_directory


def _copy_failed(copy: Path, exc: OSError) -> UserError:
    """The copy's failure, said against the run's directory (TMPDIR), which is what
    lacks room or permission, not the library copied (shutil names either)."""
    shutil.rmtree(copy, ignore_errors=True) if copy.is_dir() else copy.unlink(missing_ok=True)
    errors = exc.args[0] if isinstance(exc, shutil.Error) and exc.args else None
    if isinstance(errors, list) and errors:
        why = str(errors[0][2]).split(":", 1)[0].split("] ", 1)[-1]  # "[Errno 28] No space..."
    else:
        why = exc.strerror or str(exc)
    return UserError(
        f"cannot copy the libraries the target loads into {copy.parent.parent} (TMPDIR): "
        f"{why}; free space there or point TMPDIR elsewhere"
    )


def loadable_by_target(library: Path) -> Path:
    """The path the target loads `library` from: as root, the run's world-readable copy;
    otherwise the library itself (the target runs as this user)."""
    if os.geteuid() != 0:
        return library
    copy = _directory() / library.name
    if not copy.exists():
        try:
            shutil.copyfile(library, copy)
        except OSError as exc:
            raise _copy_failed(copy, exc) from None
        copy.chmod(0o755)
    return copy


def loadable_directory_by_target(directory: Path) -> Path:
    """The path the target imports the files of `directory` from (the Python startup hook):
    as root, a world-readable copy in the run's directory; otherwise `directory` itself."""
    if os.geteuid() != 0:
        return directory
    copy = _directory() / directory.name
    if not copy.exists():
        try:
            shutil.copytree(directory, copy, ignore=shutil.ignore_patterns("__pycache__"))
        except OSError as exc:  # shutil.Error too
            raise _copy_failed(copy, exc) from None
        for path in (copy, *copy.iterdir()):
            path.chmod(0o755)
    return copy
