"""What the fault tests share: the CLI run as root or as `nobody`, directories other users
can reach (a sticky one for plants), a small tmpfs that is full, a run's temp directory.

Running as nobody: the interpreter of the venv lives under /root (pyenv), which nobody cannot
enter, so `setpriv`/`runuser` cannot start it.  The CLI is started as root instead, imports
what the commands need, then drops to uid/gid 65534 with no groups (setgroups, setgid,
setuid: real, effective and saved ids) before the command runs: every file it opens after
that is opened as nobody, which is what the tests are about.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from ..conftest import REPO

NOBODY = 65534

# Imported before the privileges go: nobody could not read them from the interpreter's tree.
_PREIMPORT = (
    "collector.cli",
    "collector.batch_query",
    "collector.commands.convert",
    "collector.commands.flamegraph",
    "collector.commands.folded",
    "collector.commands.merge",
    "collector.commands.query",
    "collector.commands.report",
    "collector.commands.view",
    "collector.sources.kineto",
    "exporters.perfetto.engine.trace_processor",
    "exporters.perfetto.engine.views",
    "exporters.perfetto.engine.wasm_engine",
    "exporters.report.ui_server",
    "collector.files",
    "concurrent.futures.process",
    "csv",
    "hmac",
    "http.client",
    "http.cookies",
    "json",
    "secrets",
    "urllib.parse",
    "urllib.request",
    "webbrowser",
    "encodings.idna",
    "importlib.readers",
    "importlib.resources.readers",
)

_AS_USER = """
import importlib, os, sys
for name in {modules!r}:
    try:
        importlib.import_module(name)
    except ImportError:
        pass  # a module of a newer version, absent here
os.setgroups([])
os.setgid({uid})
os.setuid({uid})
assert os.getuid() == os.geteuid() == {uid}
"""


def python_as(
    uid: int,
    code: str,
    *args: str | Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """Run `code` as user `uid` (see the module docstring), with `args` in sys.argv[1:]."""
    prologue = _AS_USER.format(modules=_PREIMPORT, uid=uid)
    return subprocess.run(
        [sys.executable, "-c", prologue + code, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=timeout,
    )


def cli_as(
    uid: int, *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """`xpu-perf ARGS` as user `uid`."""
    code = "import collector.cli\nsys.exit(collector.cli.main(sys.argv[1:]))\n"
    return python_as(uid, code, *args, env=env, timeout=timeout)


def cli(
    *args: str | Path, env: Mapping[str, str] | None = None, timeout: float = 300, **kw: object
) -> subprocess.CompletedProcess[str]:
    """`xpu-perf ARGS` as this user, with a timeout (a hang is a failure, not a stuck CI)."""
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        timeout=timeout,
        **kw,  # type: ignore[call-overload]
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], *needles: str) -> None:
    """A non-zero exit, no traceback, and one `xpu-perf ...: error:` line saying `needles`."""
    err = proc.stderr.strip()
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("xpu-perf ") and ": error: " in lines[0], err
    for needle in needles:
        assert needle.lower() in lines[0].lower(), (needle, err)


def require_root() -> None:
    if os.geteuid() != 0:
        pytest.fail("the fault tests run as root (CI does): tmpfs mounts, other users")


def entries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def make_fifo(path: Path) -> Path:
    os.mkfifo(path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode)
    return path


def nobody_cache(shared_dir: Path) -> dict[str, str]:
    """Environment for a command run as nobody: a HOME and a trusted cache of its own (the
    compiled trace_processor module copied from root's cache when there is one, so the
    engine need not be compiled again)."""
    home = shared_dir / "nobody_home"
    wasm = home / ".cache" / "xpu-perf" / "wasm"
    wasm.mkdir(parents=True)
    root_wasm = Path(os.path.expanduser("~")) / ".cache" / "xpu-perf" / "wasm"
    for cwasm in root_wasm.glob("*.cwasm") if root_wasm.is_dir() else ():
        shutil.copy2(cwasm, wasm / cwasm.name)
    for path in (home, *home.rglob("*")):
        os.chown(path, NOBODY, NOBODY)
        path.chmod(0o700 if path.is_dir() else 0o600)
    return {"HOME": str(home), "XDG_CACHE_HOME": str(home / ".cache")}


def kill_quietly(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
