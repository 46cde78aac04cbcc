"""The environment's say over the caches, read strictly: a value that means nothing is one
line and exit 2, never a silent default (`XPU_PERF_NO_CACHE=0` turned the cache off, and
`XPU_PERF_ENGINE_CACHE_MB=abc` meant 4096).

- `XPU_PERF_NO_CACHE`: 1/true/yes/on bypass the result store and the engine snapshots
  (`--no-cache` sets it); 0/false/no/off or unset leave them on.
- `XPU_PERF_RESULT_CACHE_MB`: the result store's size on disk (default 1024); the answers
  used longest ago go first; 0 keeps none.
- `XPU_PERF_ENGINE_CACHE_MB`: the engine snapshots' (default 4096); 0 keeps none.
"""

from __future__ import annotations

import os

from collector.errors import UserError

ENV_DISABLE = "XPU_PERF_NO_CACHE"
ENV_RESULTS_MB = "XPU_PERF_RESULT_CACHE_MB"
ENV_ENGINE_MB = "XPU_PERF_ENGINE_CACHE_MB"
DEFAULT_RESULTS_MB = 1024
DEFAULT_ENGINE_MB = 4096

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"", "0", "false", "no", "off"})


class SettingError(UserError):
    """An environment variable of the caches holds a value that means nothing."""


def disabled() -> bool:
    """Whether the caches are bypassed for this run."""
    value = os.environ.get(ENV_DISABLE, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingError(
        f"{ENV_DISABLE}={os.environ[ENV_DISABLE]!r} is neither yes nor no: set it to 1 "
        "(bypass the caches) or 0, or unset it"
    )


def _megabytes(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    if not value.isascii() or not value.isdigit():
        raise SettingError(
            f"{name}={os.environ[name]!r} is not a size: set a whole number of MB "
            f"(0 keeps nothing; unset: {default})"
        )
    return int(value)


def results_cap_bytes() -> int:
    return _megabytes(ENV_RESULTS_MB, DEFAULT_RESULTS_MB) * 1024**2


def engine_cap_bytes() -> int:
    return _megabytes(ENV_ENGINE_MB, DEFAULT_ENGINE_MB) * 1024**2


def check() -> None:
    """Every setting read once, so a bad one fails the command before any work."""
    if not disabled():
        results_cap_bytes()
        engine_cap_bytes()
