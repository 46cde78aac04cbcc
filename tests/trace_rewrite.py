"""A trace rewritten in place with another's bytes, its inode and times kept: what a cache
keyed by file identity alone would answer stale (tests of the result cache and the engine
snapshot)."""

from __future__ import annotations

import os
from pathlib import Path

from .conftest import REPO, run_cli

OTHER = REPO / "tests" / "data" / "kineto_outside" / "cuda_event_sync.json.gz"


def rewrite_in_place(trace: Path, work: Path) -> Path:
    """Overwrite `trace` with the conversion of OTHER (same inode, same mtime); returns that
    conversion, for the answers a fresh load of it gives."""
    other = work / "other.perfetto-trace"
    run_cli("convert", OTHER, "-o", other, check=True)
    st = trace.stat()
    with trace.open("r+b") as f:
        f.truncate(0)
        f.write(other.read_bytes())
    os.utime(trace, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert trace.stat().st_ino == st.st_ino
    return other
