"""Files of a recording that another user may control: reading what the target wrote, and
root's own writes beside it.

The target of a recording (sudo's user, or a process that dropped privileges) writes its
streams into directories it owns.  Whatever lies there may have been planted: a FIFO (an
open() would block record for ever), a symlink or a hard link to a file only root may read.
So a file of such a directory is read only through `read_owned`: its directory opened
without following a symlink, the file opened relative to it with O_NOFOLLOW|O_NONBLOCK,
then accepted only if fstat says it is a regular file with one link, owned by the
directory's owner (the user who writes there); anything else is a `RejectedFile`.

Root never writes into such a directory.  What record writes itself (the manifest, the GPU
counters) goes into directories root owns, through `write_new` (O_CREAT|O_EXCL|O_NOFOLLOW:
never an existing name) and `replace` (a new file, then renamed over the old one).
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from pathlib import Path

# uid-N/: where a process that became user N writes (cupti_inject/src/process_hooks.c).
USER_DIRECTORY = re.compile(r"uid-(\d+)")
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RejectedFile(OSError):
    """A file that is not what its writer would have made (a FIFO, a link, another owner's):
    `path: what it is`."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path}: {what}")
        self.path = path
        self.what = what

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _open_directory(path: Path) -> int:
    """`path` opened as a directory, never through a symlink (ELOOP/ENOTDIR: rejected)."""
    try:
        return os.open(path, _DIRECTORY_FLAGS)
    except OSError as exc:
        if exc.errno in (40, 20):  # ELOOP, ENOTDIR: a symlink or a file in its place
            raise RejectedFile(path, "not a directory (a symlink?)") from None
        raise


def open_owned(path: Path) -> int:
    """A read-only descriptor of `path` once it passes the checks (module docstring); in a
    uid-N directory, that directory must be user N's too."""
    parent = path.parent
    directory = _open_directory(parent)
    try:
        dir_st = os.fstat(directory)
        user = USER_DIRECTORY.fullmatch(parent.name)
        if user is not None and dir_st.st_uid != int(user[1]):
            raise RejectedFile(parent, f"owned by uid {dir_st.st_uid}, not {user[1]}")
        try:
            fd = os.open(path.name, _READ_FLAGS, dir_fd=directory)
        except OSError as exc:
            if exc.errno == 40:  # ELOOP: O_NOFOLLOW met a symlink
                raise RejectedFile(path, "a symlink") from None
            raise
    finally:
        os.close(directory)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise RejectedFile(path, _kind(st.st_mode))
        if st.st_uid != dir_st.st_uid:
            raise RejectedFile(
                path, f"owned by uid {st.st_uid}, not by its directory's user (uid {dir_st.st_uid})"
            )
        if st.st_nlink != 1:
            raise RejectedFile(path, f"{st.st_nlink} links (a hard link to another file)")
        # Reads block on a regular file anyway; the flag was for the open (a FIFO).
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_owned(path: Path) -> bytes:
    """The bytes of `path` if it passes the checks (module docstring); else RejectedFile."""
    with os.fdopen(open_owned(path), "rb") as f:
        return f.read()


def write_new(path: Path, data: bytes, mode: int = 0o600) -> None:
    """`data` as a new file at `path` (never an existing name, never through a symlink);
    on failure nothing is left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except BaseException:
        with contextlib.suppress(OSError):
            path.unlink()
        raise


def replace(path: Path, data: bytes, mode: int = 0o600) -> None:
    """`data` in place of `path`: a new file beside it renamed over it (in a directory only
    this user can write, where no other name can appear)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    write_new(tmp, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
