"""Inputs and outputs on disk: the checks every command makes before any work, and the one
way anything writes an output file.

Outputs.  Commands run as root in shared and sticky directories (/tmp, a job's scratch),
where another user can plant a name beside the output.  So an output is never opened by a
predictable name: it is written to a temporary file created exclusively (O_CREAT|O_EXCL|
O_NOFOLLOW, random name, known before the file exists) in the output's directory, then
renamed over the output, which replaces a planted symlink instead of following it.  The
temporary file is removed on every error, Ctrl-C, SIGTERM (see `terminate_on_sigterm`) and
SystemExit, so a failed run leaves nothing; the finished file gets the mode a plain open
would have given it (0666 & ~umask).

Inputs.  An input must be a regular file this user can read: a directory, a FIFO (which
would hang the reader) or an unreadable file is one line, said before anything is opened.
An output that is the same file as an input (by inode, so through symlinks and hard links
too) is refused before any work: writing it would destroy the input.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import secrets
import shutil
import signal
import stat
import sys
from collections.abc import Iterable
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO, AnyStr, Generic, Literal, overload

from collector.errors import Terminated, UserError


class FileError(UserError):
    """An input or output file that cannot be used; the message is one line."""


def check_input(path: str | os.PathLike[str], what: str = "trace file") -> Path:
    """`path`, if it is a regular file this user can read; else a FileError saying why.
    Never opens a non-regular file (a FIFO would block the open)."""
    p = Path(path)
    try:
        st = os.stat(p)
    except FileNotFoundError:
        raise FileError(f"no such {what}: {p}") from None
    except OSError as exc:
        raise FileError(f"cannot read {p}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise FileError(f"{p} is a directory, not a {what}")
    if not stat.S_ISREG(st.st_mode):
        raise FileError(f"{p} is not a regular file (a FIFO, socket or device); give a {what}")
    try:
        with open(p, "rb"):
            pass
    except OSError as exc:
        raise FileError(f"cannot read {p}: {exc.strerror}") from None
    return p


def check_output(
    path: str | os.PathLike[str], inputs: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """`path`, if an output can be written there without harm: its directory exists and is
    writable, it is not a directory, and it is none of `inputs` (same inode, whatever the
    names).  Said before the command does any work."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise FileError(f"cannot write {p}: no directory {parent}")
    for source in inputs:
        if same_file(p, source):
            raise FileError(
                f"cannot write {p}: it is the input {source}; writing it would destroy the "
                "input (pick another -o)"
            )
    if p.is_dir():
        raise FileError(f"cannot write {p}: it is a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise FileError(f"cannot write {p}: permission denied in {parent}")
    return p


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two names reach one file (symlinks followed); False if either is missing."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _umask() -> int:
    # Read without changing it where the kernel says it (Linux >= 4.7); else set and restore.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class OutputFile(Generic[AnyStr]):
    """An output written whole or not at all: a temporary file created exclusively beside
    `path`, renamed over it by `commit()` (a context manager commits on a clean exit and
    discards on any exception, KeyboardInterrupt and SystemExit included).  `file_mode`:
    the finished file's permissions (default: what a plain open() would give; a private
    cache passes 0o600).  `mode` "wb" (the default) writes bytes, "w" text in `encoding`."""

    path: Path
    tmp_path: Path

    @overload
    def __init__(
        self: OutputFile[bytes],
        path: str | os.PathLike[str],
        mode: Literal["wb"] = "wb",
        file_mode: int | None = None,
    ) -> None: ...

    @overload
    def __init__(
        self: OutputFile[str],
        path: str | os.PathLike[str],
        mode: Literal["w"],
        file_mode: int | None = None,
        *,
        encoding: str,
    ) -> None: ...

    def __init__(
        self,
        path: str | os.PathLike[str],
        mode: str = "wb",
        file_mode: int | None = None,
        encoding: str | None = None,
    ) -> None:
        self.path = Path(path)
        fd = self._create_temporary()
        try:
            # made 0600; else what a plain open() would have made
            os.fchmod(fd, 0o666 & ~_umask() if file_mode is None else file_mode)
            self.file: IO[AnyStr] = os.fdopen(fd, mode, encoding=encoding)
        except BaseException:
            os.close(fd)
            self.tmp_path.unlink(missing_ok=True)
            raise
        self._done = False

    def _create_temporary(self) -> int:
        """The temporary file, made exclusively (O_EXCL, a planted name or symlink is never
        opened), its name known before it exists: a signal's exception raised the moment
        it is made (inside mkstemp, which returns the name only after) left it behind."""
        for _ in range(_TEMPORARY_ATTEMPTS):
            self.tmp_path = _temporary_name(self.path)
            try:
                return os.open(self.tmp_path, _TEMPORARY_FLAGS, 0o600)
            except FileExistsError:
                continue
            except BaseException:
                self.tmp_path.unlink(missing_ok=True)
                raise
        raise FileExistsError(errno.EEXIST, "no unused temporary name", str(self.tmp_path))

    def commit(self) -> Path:
        """Close the file and move it into place; on failure nothing is left."""
        if self._done:
            return self.path
        self._done = True
        try:
            self.file.close()
            os.replace(self.tmp_path, self.path)
        except BaseException:
            self.tmp_path.unlink(missing_ok=True)
            raise
        return self.path

    def discard(self) -> None:
        """Drop the temporary file (idempotent)."""
        if self._done:
            return
        self._done = True
        try:
            self.file.close()
        except OSError:
            pass  # a full disk fails the flush too; the file goes anyway
        finally:
            self.tmp_path.unlink(missing_ok=True)

    def __enter__(self) -> OutputFile[AnyStr]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.discard()


def write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write `text` (UTF-8) as the whole of `path`; an OSError becomes one line."""
    try:
        with OutputFile(path, "w", encoding="utf-8") as out:
            out.file.write(text)
    except OSError as exc:
        raise FileError(f"cannot write {path}: {exc.strerror}") from None


def _raise_terminated(signum: int, _frame: FrameType | None) -> None:
    raise Terminated(signum)


def terminate_on_sigterm() -> None:
    """SIGTERM (and SIGHUP) raise Terminated in the main thread, so the `with` and
    `finally` blocks run and temporary outputs are removed (the default action would end
    the process on the spot and leave them).  Handlers installed later, such as record's
    while its target runs, take over and put this one back."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is signal.SIG_DFL:
            signal.signal(sig, _raise_terminated)


_TEMPORARY_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
_TEMPORARY_ATTEMPTS = 100


def _temporary_name(path: Path) -> Path:
    """`.NAME.<random>.tmp` beside `path` (hidden, and never the name of an output)."""
    parent = path.parent if str(path.parent) else Path(".")
    return parent / f".{path.name}.{secrets.token_hex(6)}.tmp"


_QUIT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# This process's own run directories (library copies, private caches), removed by one
# callback at exit.
_REMOVED_AT_EXIT: list[Path] = []


def remove_tree_at_exit(path: Path) -> None:
    """Remove the directory `path` when the process exits (a run's private directory)."""
    if not _REMOVED_AT_EXIT:
        atexit.register(_remove_trees)
    _REMOVED_AT_EXIT.append(path)


def _remove_trees() -> None:
    """The exit's removal of the run's directories.  A Ctrl-C, SIGTERM or SIGHUP arriving
    meanwhile (record has written its trace by then) printed a KeyboardInterrupt traceback
    from inside the removal; it is noted instead, the removal finishes, and the process
    then ends as a signal ends it, 128 + N (never 0 after a signal)."""
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: caught.append(n)) for s in _QUIT_SIGNALS}
    while _REMOVED_AT_EXIT:
        shutil.rmtree(_REMOVED_AT_EXIT.pop(), ignore_errors=True)
    if caught:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(128 + caught[0])
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def starts_framed(path: Path, packets: int = 8) -> bool:
    """Whether `path` starts as a Perfetto protobuf trace: its first packets (up to `packets`
    of them, in its first 64 KiB) each a field-1 tag (0x0a) and a length that
    lands on the next tag or past the end of what was read.  The tag is a newline and a
    first packet of 123 or 91 bytes has `{` or `[` as its length: such a trace is no JSON."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(1 << 16)
    at = seen = 0
    while at < len(head) and seen < packets:
        if head[at] != 0x0A:
            return False
        length, shift, at = 0, 0, at + 1
        while True:
            if at >= len(head) or shift > 63:
                return False
            byte = head[at]
            length |= (byte & 0x7F) << shift
            at, shift = at + 1, shift + 7
            if not byte & 0x80:
                break
        at += length
        seen += 1
        if at > size:
            return False
    return seen > 0
