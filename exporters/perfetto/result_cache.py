"""The second look's store: what each SQL statement answered on one trace, kept on disk.

Loading a big trace into trace_processor takes seconds to minutes, and `report` or `folded`
then spend as long again in their SQL; a second look at the same trace asks the same
statements.  This store keeps each statement's outcome (its rows, or its error) under a key
that names the trace's exact bytes, the engine and every statement run before it
(`cached_trace.py` chains them), so a second look reads answers instead of loading.

Never stale.  A trace's key is its identity on disk (device, inode, size, mtime_ns and
ctime_ns: a rewrite in place changes ctime, which no user can set back) plus a BLAKE2 hash
of its contents: the whole file up to `FULL_HASH_BYTES`, else its first and last MiB.

Private and checked.  Answers say what the traced program ran, so the store is
`$XDG_CACHE_HOME/xpu-perf/results` (else ~/.cache), directories 0700 and files 0600 of this
user.  Before a file is read: the directories from the cache root down pass
`collector/cache_trust.py` (owned by this user or root, writable by nobody else) and are
not open to others; the file is opened with O_NOFOLLOW (a planted symlink is never
followed), must be a regular file of this user, not open to others, and must name the key
it was asked for.  Anything else is a miss; an untrusted directory turns the store off for
the run with one line on stderr.  Files are written by `collector/files.OutputFile` (a
random exclusive name renamed into place) with mode 0600.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector import cache_trust
from collector.files import OutputFile

ENV_DISABLE = "XPU_PERF_NO_CACHE"
FORMAT = 1  # bump when what a file holds changes
FULL_HASH_BYTES = 64 * 1024 * 1024  # BLAKE2b reads ~1 GB/s here: <0.1 s for the whole file
_EDGE_BYTES = 1024 * 1024
# A result larger than this many cells is not kept: `query "select * from slice"` on a big
# trace would cost more to write than it saves, and fills the disk.
MAX_CELLS = 2_000_000
# Traces whose answers are kept; the least recently looked at go first.
MAX_TRACES = 32
_PRIVATE = stat.S_IRWXG | stat.S_IRWXO


def results_root() -> Path:
    return cache_trust.cache_root() / "xpu-perf" / "results"


def trace_key(path: Path) -> str:
    """What names this trace's bytes: identity on disk plus a hash of its contents."""
    h = hashlib.blake2b(digest_size=20)
    with path.open("rb") as f:
        st = os.fstat(f.fileno())
        h.update(f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}".encode())
        if st.st_size <= FULL_HASH_BYTES:
            while chunk := f.read(8 * 1024 * 1024):
                h.update(chunk)
        else:
            h.update(f.read(_EDGE_BYTES))
            f.seek(st.st_size - _EDGE_BYTES)
            h.update(f.read(_EDGE_BYTES))
    return h.hexdigest()


@dataclass(frozen=True)
class Outcome:
    """What one statement did: its rows (as the method returns them) or its error."""

    rows: Any = None
    error: str | None = None


class ResultStore:
    """The answers kept for one trace (a directory named by its key)."""

    def __init__(self, trace: str, root: Path | None = None) -> None:
        self.root = root or results_root()
        self.dir = self.root / trace
        self.enabled = True
        self.refusal: str | None = None
        self._wrote = False

    def _dir_reason(self, directory: Path) -> str | None:
        reason = cache_trust.untrusted_reason(directory, cache_trust.cache_root())
        if reason is not None:
            return reason
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return None
        if st.st_mode & _PRIVATE:
            return f"{directory} is open to group or others (mode {st.st_mode & 0o777:o})"
        return None

    def check(self) -> bool:
        """Whether the store may be used; if not, say why once and turn it off."""
        if not self.enabled:
            return False
        for directory in (self.root, self.dir):
            reason = self._dir_reason(directory)
            if reason is not None:
                self.enabled = False
                self.refusal = reason
                cache_trust.refuse("query results", reason, "loading the trace")
                return False
        return True

    def _path(self, key: str) -> Path:
        return self.dir / f"{key}.json"

    def _read(self, path: Path) -> bytes | None:
        """The file's bytes if it is a regular file of this user closed to others (never
        through a symlink), else None."""
        if not self.enabled:
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None  # missing, a symlink (ELOOP), not ours to read
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & _PRIVATE:
                return None
            try:
                return f.read()
            except OSError:
                return None

    def _write(self, path: Path, data: bytes) -> None:
        try:
            for directory in (self.root, self.dir):
                directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            with OutputFile(path, "wb", file_mode=0o600) as out:
                out.file.write(data)
            self._wrote = True
        except OSError:
            pass

    def get(self, key: str) -> Outcome | None:
        """The outcome kept under `key`, or None (missing, unreadable or not trusted)."""
        data = self._read(self._path(key))
        if data is None:
            return None
        try:
            doc = json.loads(data)
        except ValueError:
            return None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("key") != key:
            return None
        return Outcome(rows=doc.get("rows"), error=doc.get("error"))

    def get_arrays(self, key: str) -> dict[str, Any] | None:
        """Columns kept by `put_arrays` under `key` (numpy arrays), or None."""
        import io

        import numpy as np

        data = self._read(self.dir / f"{key}.npz")
        if data is None:
            return None
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as kept:
                if str(kept["key"]) != key or int(kept["format"]) != FORMAT:
                    return None
                names = [str(n) for n in kept["names"]]
                out = {}
                for i, name in enumerate(names):
                    if f"values{i}" in kept:  # text: the distinct values and each cell's
                        values = kept[f"values{i}"].astype(object)
                        out[name] = values[kept[f"codes{i}"]]
                    else:
                        out[name] = kept[f"ints{i}"]
        except (ValueError, KeyError, OSError, IndexError, EOFError, zipfile.BadZipFile):
            return None  # damaged or not ours: a miss
        return out

    def put_arrays(self, key: str, columns: dict[str, Any]) -> bool:
        """Keep columns of integers or text (no NULL) in numpy's own format, loaded in
        milliseconds whatever their size (a JSON of the 300k GPU ops of a 5M-slice trace
        took longer to read than the rest of a second look); False where a column is
        anything else (the caller keeps it as rows)."""
        import io

        import numpy as np

        from exporters.perfetto.trace_processor import typed_column

        arrays: dict[str, Any] = {
            "key": np.array(key),
            "format": np.array(FORMAT),
            "names": np.array(list(columns), dtype=str),
        }
        for i, cells in enumerate(map(typed_column, columns.values())):
            if cells.dtype == np.int64:
                arrays[f"ints{i}"] = cells
            elif {type(v) for v in cells.tolist()} == {str}:
                values, codes = np.unique(cells.astype(str), return_inverse=True)
                arrays[f"values{i}"], arrays[f"codes{i}"] = values, codes.astype(np.int64)
            else:
                return False
        if not self.enabled:
            return True
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        self._write(self.dir / f"{key}.npz", buffer.getvalue())
        return True

    def put(self, key: str, outcome: Outcome) -> None:
        """Keep `outcome` under `key`; a full disk or a read-only home only costs the next
        look its speed, so write errors are dropped."""
        if not self.enabled:
            return
        try:
            text = json.dumps(
                {"format": FORMAT, "key": key, "rows": outcome.rows, "error": outcome.error},
                separators=(",", ":"),
            )
        except (TypeError, ValueError):
            return  # a blob column: not kept
        self._write(self._path(key), text.encode())

    def touch(self) -> None:
        """Mark this trace as just looked at, and drop the traces looked at longest ago."""
        if not self.enabled:
            return
        try:
            os.utime(self.dir)
        except OSError:
            return
        if self._wrote:
            prune(self.root, MAX_TRACES)


def prune(root: Path, keep: int) -> None:
    """Remove all but the `keep` trace directories used last."""
    try:
        entries = [(e.stat(follow_symlinks=False).st_mtime_ns, e.path) for e in os.scandir(root)]
    except OSError:
        return
    entries.sort(reverse=True)
    for _, path in entries[keep:]:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
