"""Whether a file in a cache may be loaded as code.

Two caches hold native code: the compiled trace_processor module (wasmtime deserializes it
into machine code) and the built CUPTI injection library (loaded into the target).  Whoever
can write such a file, or rename entries in a directory above it, runs code as the user of
xpu-perf (often root).  So a cached file is used only when it and every directory from the
cache root down to it are owned by the current user or root and writable by no one else;
otherwise the caller rebuilds in a private directory and says so in one line.
"""

from __future__ import annotations

import errno
import functools
import os
import pwd
import stat
import sys
import tempfile
from pathlib import Path

from collector.files import remove_tree_at_exit

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def cache_root() -> Path:
    """$XDG_CACHE_HOME, else ~/.cache; for root, only where it is root's.  Root with
    another user's HOME (`sudo` keeping it, `su` without `-`) would create `.cache` there
    root-owned, which the user then cannot write (nor can any other program of theirs), and
    would trust a cache that user can rename; so where a directory on the way belongs to
    another user, root uses its own home's cache (from the password database), and where
    that is no better, a private directory for this run.  Other users cannot create
    anything in a directory that is not theirs, and `untrusted_reason` refuses what they
    find there."""
    configured = Path(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    )
    if os.geteuid() != 0 or _belongs_to_us(configured):
        return configured
    try:
        own = Path(pwd.getpwuid(os.geteuid()).pw_dir) / ".cache"
    except KeyError:  # no passwd entry (a container's arbitrary uid)
        own = None
    if own is not None and own.is_absolute() and _belongs_to_us(own):
        return own
    return _run_cache()


def _belongs_to_us(path: Path) -> bool:
    """Whether every existing directory from / down to `path` is this user's or root's."""
    path = Path(os.path.abspath(path))
    for directory in (*reversed(path.parents), path):
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            return True  # the rest is ours to create
        except OSError:
            return False
        if not _owner_ok(st):
            return False
    return True


@functools.cache
def _run_cache() -> Path:
    return private_dir("xpu-perf-cache-")


def make_private_dirs(path: Path) -> None:
    """`path` and the directories missing above it, each made 0700 whatever the umask
    (Path.mkdir(parents=True) makes the parents 0777 & ~umask: under umask 000 a cache the
    checks then refuse on every run).  Never inside a directory another user owns; OSError
    where it cannot be made."""
    path = Path(os.path.abspath(path))
    missing: list[Path] = []
    at = path
    while not os.path.lexists(at):
        missing.append(at)
        at = at.parent
    if missing:
        st = os.stat(at)
        if not _owner_ok(st):
            raise PermissionError(errno.EPERM, f"{at} is owned by uid {st.st_uid}", str(at))
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            continue  # another look made it at the same time
        os.chmod(directory, 0o700)  # what the umask took from 0700


def _owner_ok(st: os.stat_result) -> bool:
    return st.st_uid in (os.geteuid(), 0)


def untrusted_reason(path: Path, root: Path) -> str | None:
    """Why `path` (a file or directory inside `root`) must not be trusted, or None.

    Checked: `path` itself (not a symlink; a file must be a regular file) and `root` and
    every directory between them (owner, no group/other write).  A `path` outside `root`
    is checked with its parent as the root.  Missing entries are the caller's business
    (None for what does not exist yet)."""
    path = Path(os.path.abspath(path))
    root = Path(os.path.abspath(root))
    if not path.is_relative_to(root) or path == root:
        root = path.parent
    dirs = [root, *(root / Path(*path.relative_to(root).parts[:i])
                    for i in range(1, len(path.relative_to(root).parts)))]  # fmt: skip
    for directory in dirs:
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return f"{directory} is not a directory"
        if not _owner_ok(st):
            return f"{directory} is owned by uid {st.st_uid}"
        if st.st_mode & _OTHERS_WRITE:
            return f"{directory} is writable by group or others"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symlink"
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return f"{path} is not a regular file"
    if not _owner_ok(st):
        return f"{path} is owned by uid {st.st_uid}"
    if st.st_mode & _OTHERS_WRITE:
        return f"{path} is writable by group or others"
    return None


def private_dir(prefix: str) -> Path:
    """A fresh directory only this user can use (mkdtemp: mode 0700), removed when the
    process exits (what is built there serves this run only: one directory a run would
    otherwise pile up in the temp directory)."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    remove_tree_at_exit(path)
    return path


def refuse(what: str, reason: str, instead: str) -> None:
    """The one line that says a cached file was not used."""
    print(f"xpu-perf: not using the cached {what} ({reason}); {instead}", file=sys.stderr)
