"""Who the target runs as: under sudo the invoking user, not root, so the stream
directories the target writes into are handed to that user."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TypedDict


class Credentials(TypedDict, total=False):
    """Popen's keywords for the user the target runs as (none: record's own)."""

    user: int
    group: int
    extra_groups: list[int]


def target_credentials() -> Credentials:
    """Under sudo, the target runs as the invoking user (SUDO_UID/SUDO_GID), not as root:
    Popen's user/group/extra_groups for it ({} when not under sudo)."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid:
        return Credentials()
    import pwd

    try:
        groups = os.getgrouplist(pwd.getpwuid(int(uid)).pw_name, int(gid))
    except KeyError:
        groups = [int(gid)]
    return Credentials(user=int(uid), group=int(gid), extra_groups=groups)


def share_with_target(directory: Path) -> None:
    """A stream directory the target can write to: under sudo the target is the user.  As
    root otherwise, traversable by all (0711: not listable, no one else may create in it), so
    that a process which becomes another user (setpriv, runuser, su) reaches the uid-N
    directory the preloaded library made for that user while still root
    (cupti_inject/src/process_hooks.c); its files are 0600."""
    creds = target_credentials()
    if creds:
        os.chown(directory, creds["user"], creds["group"])
    elif os.geteuid() == 0:
        directory.chmod(0o711)
