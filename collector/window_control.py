"""The capture-window control page one recording shares with its target's processes.

`record` creates a small file and names it in XPU_PERF_WINDOW_CONTROL; the injection library
and the CPU sampler in every process of the tree map it (cupti_inject/src/window_control.h has
the same layout).  Record opens and closes windows of the whole tree by writing `tree_open`
(an outside toggle; --delay/--duration for the CPU side); each process's injection library
counts the windows it has open in `process_windows` (cudaProfilerApi, NVTX, delay), and the
CPU samplers sample only while any window is open.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from types import TracebackType
from typing import Protocol

MAGIC = 0x43575058  # "XPWC"
VERSION = 1
# magic, version, tree_open, tree_changes, process_windows: 4-byte little-endian fields.
_LAYOUT = struct.Struct("<IIIIi")
_TREE_OPEN = 8
_TREE_CHANGES = 12
_PROCESS_WINDOWS = 16
SIZE = 64  # room for later fields; the libraries check magic and version


class WindowState(Protocol):
    """The recording's capture windows as a sampler in record's process sees them."""

    @property
    def tree_open(self) -> bool: ...
    @property
    def process_windows(self) -> int: ...


class WindowControl:
    """The control page, created (closed: no window open) at `path`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.ftruncate(fd, SIZE)
            self._page = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            os.close(fd)
        _LAYOUT.pack_into(self._page, 0, MAGIC, VERSION, 0, 0, 0)

    @property
    def tree_open(self) -> bool:
        return bool(self._read_u32(_TREE_OPEN))

    def set_tree_open(self, open_: bool) -> None:
        """Open or close the window of the whole tree; a change is counted so that a poller
        that missed the flip in between still sees that one happened."""
        if self.tree_open == open_:
            return
        # Aligned 4-byte stores: each is one store, so a reader never sees half a value.
        self._page[_TREE_OPEN : _TREE_OPEN + 4] = struct.pack("<I", int(open_))
        changes = self._read_u32(_TREE_CHANGES) + 1
        self._page[_TREE_CHANGES : _TREE_CHANGES + 4] = struct.pack("<I", changes & 0xFFFFFFFF)

    @property
    def process_windows(self) -> int:
        """Windows open in the target's processes right now."""
        return int(struct.unpack_from("<i", self._page, _PROCESS_WINDOWS)[0])

    def env(self) -> dict[str, str]:
        return {"XPU_PERF_WINDOW_CONTROL": str(self.path)}

    def _read_u32(self, offset: int) -> int:
        return int(struct.unpack_from("<I", self._page, offset)[0])

    def close(self) -> None:
        self._page.close()

    def __enter__(self) -> WindowControl:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
