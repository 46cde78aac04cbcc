"""The second look's store: what each SQL statement answered on one trace, kept on disk.

Loading a big trace into trace_processor takes seconds to minutes, and `report` or `folded`
then spend as long again in their SQL; a second look at the same trace asks the same
statements.  This store keeps each statement's answer (its rows; never an error) under a key
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
random exclusive name renamed into place, so a look at the same trace running at the same
time reads a whole entry or none) with mode 0600.

Verified.  Each entry carries a BLAKE2 digest of its key and every byte of its answer,
checked before the answer is parsed; a parsed answer must then have the shape its
statement's answers have (`answer_shape.py`).  An entry that fails either (a flipped bit,
a file cut short by a full disk or a crash) is removed, one line says so, and the engine
answers: an answer read from the store is byte for byte one the engine gave.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import os
import shutil
import stat
import sys
import time
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collector import cache_trust
from collector.files import OutputFile
from exporters.perfetto.engine import cache_settings

ENV_DISABLE = cache_settings.ENV_DISABLE
FORMAT = 2  # bump when what a file holds changes
_MAGIC = b"XPUANS\0\2"  # an answer kept as columns starts so
_DIGEST_BYTES = 32
FULL_HASH_BYTES = 64 * 1024 * 1024  # a file this small is hashed whole: a small cost
_EDGE_BYTES = 1024 * 1024
# A result larger than this many cells is not kept: `query "select * from slice"` on a big
# trace would cost more to write than it saves, and fills the disk.
MAX_CELLS = 2_000_000
# Traces whose answers are kept; the least recently looked at go first.  Their total size
# is capped too (cache_settings.results_cap_bytes: 1 GiB unless set), the answers used
# longest ago going first.
MAX_TRACES = 32
_STALE_TMP_S = 3600  # a temporary file older than this is what a killed writer left
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
    """What one statement answered: its rows as the method returns them (None for a
    statement run for its effect).  Errors are never kept: an error may come from the
    engine's state (a table another look's answer stood for, a full heap) rather than the
    statement, and a kept one would fail every later look."""

    rows: Any = None


class _Damaged(Exception):
    """An entry of ours whose bytes are not what was written (the message says how)."""


def _digest(key: str, kind: str, payload: bytes | memoryview) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    h.update(f"{key}\0{kind}\0".encode())
    h.update(payload)
    return h.digest()


# An answer kept as rows is one JSON object, {"format":F,"key":K,"rows":R,"sum":S}, where S
# is the hex digest of every byte before `,"sum"`: still JSON (readable by hand), and
# checked before it is parsed.
_SUM_OPEN = b',"sum":"'
_SUM_CLOSE = b'"}'
_SUM_TAIL = len(_SUM_OPEN) + 2 * _DIGEST_BYTES + len(_SUM_CLOSE)


def seal_rows(key: str, rows_json: str) -> bytes:
    body = f'{{"format":{FORMAT},"key":{json.dumps(key)},"rows":{rows_json}'.encode()
    return body + _SUM_OPEN + _digest(key, "json", body).hex().encode() + _SUM_CLOSE


def unseal_rows(key: str, data: bytes) -> Any:
    """The rows of an entry sealed for `key`; _Damaged if any byte differs."""
    if len(data) < _SUM_TAIL or not (
        data.endswith(_SUM_CLOSE) and data[-_SUM_TAIL:].startswith(_SUM_OPEN)
    ):
        raise _Damaged(f"no checksum at its end ({len(data)} bytes)")
    body = data[:-_SUM_TAIL]
    if _digest(key, "json", body).hex().encode() != data[-_SUM_TAIL + len(_SUM_OPEN) : -2]:
        raise _Damaged("checksum mismatch")
    try:
        doc = json.loads(body + b"}")
    except (ValueError, RecursionError):
        raise _Damaged("not JSON") from None
    if not isinstance(doc, dict) or doc.keys() != {"format", "key", "rows"}:
        raise _Damaged("not an answer")
    if doc["format"] != FORMAT or doc["key"] != key:
        raise _Damaged("not this statement's answer")
    return doc["rows"]


def seal_arrays(key: str, npz: bytes) -> bytes:
    """An answer kept as columns: a header, the digest of the key and the .npz, the .npz."""
    return _MAGIC + _digest(key, "npz", npz) + npz


def unseal_arrays(key: str, data: bytes) -> memoryview:
    """The .npz of an entry sealed for `key`; _Damaged if any byte differs."""
    head = len(_MAGIC) + _DIGEST_BYTES
    if len(data) < head:
        raise _Damaged(f"cut short at {len(data)} bytes")
    if data[: len(_MAGIC)] != _MAGIC:
        raise _Damaged("not an entry of this version")
    payload = memoryview(data)[head:]
    if _digest(key, "npz", payload) != data[len(_MAGIC) : head]:
        raise _Damaged("checksum mismatch")
    return payload


class ResultStore:
    """The answers kept for one trace (a directory named by its key)."""

    def __init__(self, trace: str, root: Path | None = None) -> None:
        self.root = root or results_root()
        self.dir = self.root / trace
        self.enabled = True
        # XPU_PERF_RESULT_CACHE_MB=0: nothing kept, nothing read (the engine snapshots
        # have their own cap).
        self.cap = cache_settings.results_cap_bytes()
        self.keep = self.cap > 0
        self.refusal: str | None = None
        self.damaged: list[str] = []  # why entries were not used (the first one is said)
        self._wrote = False
        self._full = False

    def _dir_reason(self, directory: Path) -> str | None:
        reason = cache_trust.untrusted_reason(directory, cache_trust.cache_root())
        if reason is not None:
            return reason
        try:
            st = os.lstat(directory)
        except FileNotFoundError:
            return None
        if not stat.S_ISDIR(st.st_mode):
            return f"{directory} is not a directory"
        if st.st_mode & _PRIVATE:
            return f"{directory} is open to group or others (mode {st.st_mode & 0o777:o})"
        return None

    def check(self) -> bool:
        """Whether the store may be used; if not, say why once and turn it off."""
        if not self.enabled:
            return False
        for directory in (self.root, self.dir):
            try:
                reason = self._dir_reason(directory)
            except OSError as exc:  # a directory on the way this user cannot search
                reason = f"{exc.filename}: {exc.strerror}"
            if reason is not None:
                self.enabled = False
                self.refusal = reason
                cache_trust.refuse("query results", reason, "loading the trace")
                return False
        return True

    def _path(self, key: str, kind: str) -> Path:
        return self.dir / f"{key}.{kind}"

    def _read(self, key: str, kind: str) -> bytes | None:
        """The bytes kept under `key`, if its file is a regular file of this user closed to
        others (never through a symlink); else None."""
        if not (self.enabled and self.keep):
            return None
        path = self._path(key, kind)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return None  # missing, a symlink (ELOOP), not ours to read
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & _PRIVATE:
                return None  # a directory, a FIFO, a planted or loose file: never read
            if st.st_size > self.cap:
                return None  # larger than the whole store may be: not one of its answers
            with os.fdopen(fd, "rb", closefd=False) as f:
                data = f.read()
            with contextlib.suppress(OSError):
                os.utime(fd)  # just used: the last the size cap removes
        except OSError:
            return None
        finally:
            os.close(fd)
        return data

    def discard(self, key: str, kind: str, why: str) -> None:
        """An entry that is not what was kept: removed, and said once per look."""
        path = self._path(key, kind)
        with contextlib.suppress(OSError):
            if stat.S_ISREG(os.lstat(path).st_mode):
                path.unlink()
        if not self.damaged:
            print(
                f"xpu-perf: a cached query result was damaged ({why}: {path}); "
                "answering from the trace and keeping the answer again",
                file=sys.stderr,
            )
        self.damaged.append(why)

    def _write(self, path: Path, data: bytes) -> None:
        if not self.keep:
            return
        try:
            cache_trust.make_private_dirs(self.dir)
            with OutputFile(path, "wb", file_mode=0o600) as out:
                out.file.write(data)
            self._wrote = True
        except OSError as exc:
            # Nothing half written is left (OutputFile removes its temporary file); a full
            # disk is said once, since every look would otherwise lose its speed unsaid.
            if exc.errno in (errno.ENOSPC, errno.EDQUOT) and not self._full:
                self._full = True
                print(
                    f"xpu-perf: query results not kept ({exc.strerror} in {self.root}); "
                    "the next look asks the engine for them",
                    file=sys.stderr,
                )

    def get(self, key: str, valid: Callable[[Any], bool]) -> Outcome | None:
        """The outcome kept under `key` if it passes `valid` (the shape its statement's
        answers have), else None."""
        data = self._read(key, "json")
        if data is None:
            return None
        try:
            rows = unseal_rows(key, data)
        except _Damaged as exc:
            self.discard(key, "json", str(exc))
            return None
        if not valid(rows):
            self.discard(key, "json", "not the shape of its statement's answer")
            return None
        return Outcome(rows=rows)

    def get_arrays(self, key: str) -> dict[str, Any] | None:
        """Columns kept by `put_arrays` under `key` (numpy arrays), or None."""
        data = self._read(key, "npz")
        if data is None:
            return None
        try:
            out = _columns(np_load(io.BytesIO(unseal_arrays(key, data))))
        except _Damaged as exc:
            self.discard(key, "npz", str(exc))
            return None
        except (ValueError, KeyError, TypeError, OSError, IndexError, EOFError,
                zipfile.BadZipFile) as exc:  # fmt: skip
            self.discard(key, "npz", f"not columns ({type(exc).__name__})")
            return None
        return out

    def put_arrays(self, key: str, columns: dict[str, Any]) -> bool:
        """Keep columns of integers or text (no NULL) in numpy's own format, loaded in
        milliseconds whatever their size (a JSON of the 300k GPU ops of a 5M-slice trace
        took longer to read than the rest of a second look); False where a column is
        anything else (the caller keeps it as rows)."""
        import numpy as np

        from exporters.perfetto.engine.trace_processor import typed_column

        arrays: dict[str, Any] = {"names": np.array(list(columns), dtype=str)}
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
        self._write(self._path(key, "npz"), seal_arrays(key, buffer.getvalue()))
        return True

    def put(self, key: str, outcome: Outcome) -> None:
        """Keep `outcome` under `key`; a full disk or a read-only home only costs the next
        look its speed, so write errors are dropped (and nothing half written is left)."""
        if not self.enabled:
            return
        try:
            text = json.dumps(outcome.rows, separators=(",", ":"))
        except (TypeError, ValueError):
            return  # a blob column: not kept
        self._write(self._path(key, "json"), seal_rows(key, text))

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
            evict(self.root, self.cap)


def np_load(data: io.BytesIO) -> dict[str, Any]:
    """The arrays of an .npz (never pickles), read whole."""
    import numpy as np

    with np.load(data, allow_pickle=False) as kept:
        return {name: kept[name] for name in kept.files}


def _columns(kept: dict[str, Any]) -> dict[str, Any]:
    """The columns `put_arrays` wrote, checked for the shape it writes (ValueError if not)."""
    import numpy as np

    names = kept["names"]
    if names.ndim != 1 or names.dtype.kind != "U":
        raise ValueError("names")
    out: dict[str, Any] = {}
    length = None
    for i, name in enumerate(names.tolist()):
        if f"values{i}" in kept:  # text: the distinct values and each cell's
            values, codes = kept[f"values{i}"], kept[f"codes{i}"]
            if values.ndim != 1 or values.dtype.kind != "U" or codes.dtype != np.int64:
                raise ValueError(name)
            in_range = not len(codes) or 0 <= codes.min() <= codes.max() < len(values)
            if codes.ndim != 1 or not in_range:
                raise ValueError(name)
            column = values.astype(object)[codes]
        else:
            column = kept[f"ints{i}"]
            if column.ndim != 1 or column.dtype != np.int64:
                raise ValueError(name)
        if length is not None and len(column) != length:
            raise ValueError(name)
        length = len(column)
        out[name] = column
    if len(kept) != 1 + sum(2 if f"values{i}" in kept else 1 for i in range(len(out))):
        raise ValueError("extra arrays")
    return out


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


def _kept_files(root: Path) -> Iterator[tuple[int, int, str, bool]]:
    """(mtime_ns, bytes, path, is a temporary file) of each file in the trace directories."""
    with os.scandir(root) as traces:
        for trace in traces:
            if not trace.is_dir(follow_symlinks=False):
                continue
            with os.scandir(trace.path) as files:
                for entry in files:
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISREG(st.st_mode):
                        temporary = entry.name.startswith(".") and entry.name.endswith(".tmp")
                        yield st.st_mtime_ns, st.st_size, entry.path, temporary


def evict(root: Path, cap: int) -> None:
    """Remove the answers used longest ago (a hit refreshes an entry's mtime) until the rest
    fit in `cap` bytes, and what a killed writer left.  Another look may be reading or
    writing at the same time: a removed entry is a miss for it, never half an answer."""
    try:
        files = sorted(_kept_files(root), reverse=True)
    except OSError:
        return
    stale = time.time_ns() - _STALE_TMP_S * 10**9
    total = 0
    for mtime_ns, size, path, temporary in files:
        if temporary:
            if mtime_ns < stale:  # else another look writing it now
                with contextlib.suppress(OSError):
                    os.unlink(path)
            continue
        total += size
        if total > cap:
            with contextlib.suppress(OSError):
                os.unlink(path)
