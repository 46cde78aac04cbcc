"""What another user, or a mistake, can do to a cached file (the result store's answers, the
engine's snapshots), for the tests that such a file is never trusted."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

OTHER_UID = 12345  # an owner that is neither this user nor root
# The attacks `loosen` makes; each cache test adds its own beside them.
LOOSENED = ("symlink", "group readable", "other owner")


def loosen(path: Path, how: str, planted_in: Path) -> None:
    """`path` made a symlink to a copy of itself in `planted_in` (what a planted file looks
    like), readable by its group, or owned by another uid (root only)."""
    if how == "symlink":
        target = planted_in / path.name
        shutil.copy(path, target)
        path.unlink()
        path.symlink_to(target)
    elif how == "group readable":
        path.chmod(0o640)
    elif how == "other owner":
        os.chown(path, OTHER_UID, -1)
    else:
        raise AssertionError(how)
