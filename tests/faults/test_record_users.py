"""Issue 34 S1/S5: `record` as root beside a target that runs as another user (under sudo,
or after dropping privileges).  That user controls the directories its processes write
into: root must never write there, and must read from there only the regular files that
user wrote (a FIFO planted there hung record, a symlink made root read a root-only file).

The other user is a real one, made for the test (useradd) and removed after it."""

from __future__ import annotations

import json
import os
import pwd
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from ..conftest import REPO
from .support import _PREIMPORT, require_root


@pytest.fixture
def other_user() -> Iterator[pwd.struct_passwd]:
    """An unprivileged user of its own (no home, no login), deleted afterwards."""
    require_root()
    name = f"xpurec{secrets.token_hex(3)}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", "--user-group", name],
        check=True,
        capture_output=True,
    )
    try:
        yield pwd.getpwnam(name)
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _sudo_env(user: pwd.struct_passwd, tmpdir: Path) -> dict[str, str]:
    """What sudo leaves for record (sudo is not installed here; the code path is the same)."""
    return {"SUDO_UID": str(user.pw_uid), "SUDO_GID": str(user.pw_gid), "TMPDIR": str(tmpdir)}


def _cli_as(uid: int, gid: int, *args: str | Path) -> subprocess.CompletedProcess[str]:
    """`xpu-perf ARGS` as the user: started as root (the venv's interpreter lives under
    /root), the record command imported, then every id dropped before it runs."""
    modules = (*_PREIMPORT, "collector.cli", "collector.commands.record", "encodings.ascii")
    code = (
        f"import importlib, os, sys\nfor m in {modules!r}: importlib.import_module(m)\n"
        f"os.setgroups([]); os.setgid({gid}); os.setuid({uid})\n"
        'sys.exit(sys.modules["collector.cli"].main(sys.argv[1:]))\n'
    )
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "TMPDIR": "/tmp"},
        timeout=120,
    )  # fmt: skip


def _record(out: Path, env: dict[str, str], *target: str | Path, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "--no-gpu", "--no-kernel-stacks",
         "-q", "-o", out, "--", *map(str, target)],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, **env}, timeout=timeout,
    )  # fmt: skip


# Some CPU time in the target, so that it has samples (a stream) to keep.
BUSY = "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done"


def test_sudo_user_cannot_point_roots_manifest_at_another_file(
    other_user: pwd.struct_passwd,
    shared_dir: Path,
    sticky_dir: Path,
    full_disk: Path,
    tmp_path: Path,
) -> None:
    """The target (sudo's user) replaces manifest.json with a symlink to a root-only file,
    and the trace cannot be written (a full disk): root adds the end of the run to the
    manifest.  Root must not write through the symlink: the user cannot plant names where
    root writes (the stream directory is root's while record runs); the kept recording is
    then the user's, and the user writes the trace from it."""
    victim = tmp_path / "root_only.json"  # a file only root may write, in a manifest's shape
    original = json.dumps({"version": 1, "command_line": ["root's own"]})
    victim.write_text(original)
    victim.chmod(0o600)
    script = (
        'top=$(dirname "$XPU_PERF_CPU_OUT_DIR"); '
        'rm -f "$top/manifest.json" 2>/dev/null; ln -s "$0" "$top/manifest.json" 2>/dev/null; '
        'touch "$top/planted" 2>/dev/null; ' + BUSY
    )
    env = _sudo_env(other_user, sticky_dir)  # TMPDIR like /tmp
    proc = _record(full_disk / "rec.pftrace", env, "sh", "-c", script, victim)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == original, "root wrote through the user's symlink"
    match = re.search(r"--from-streams (\S+) -o", proc.stderr)
    assert match is not None, proc.stderr
    kept = Path(match[1])
    names = sorted(p.name for p in kept.iterdir())
    assert "planted" not in names, names  # no name of the user's beside root's files
    manifest = kept / "manifest.json"
    assert not manifest.is_symlink() and json.loads(manifest.read_text())["version"] == 1
    # Handed over once record was done with it: the user's, and the user finishes it.
    for path in (kept, manifest, *kept.rglob("*")):
        assert path.lstat().st_uid == other_user.pw_uid, path
    out_dir = shared_dir / "out"
    out_dir.mkdir()
    os.chown(out_dir, other_user.pw_uid, other_user.pw_gid)
    later = out_dir / "later.pftrace"
    done = _cli_as(
        other_user.pw_uid, other_user.pw_gid, "record", "--from-streams", kept, "-o", later
    )
    assert done.returncode == 0, done.stderr
    assert not kept.exists()
    with open_trace(later) as trace:
        assert trace.scalar("select count(*) from perf_sample") > 0


def test_roots_own_files_lie_where_only_root_creates_names(
    other_user: pwd.struct_passwd, shared_dir: Path, tmp_path: Path
) -> None:
    """While record runs under sudo, the directory holding root's files (the manifest) is
    root's and the target's user can create nothing in it; the target still records.  What
    the user plants in its own directories (FIFOs named like a stream and a names file) is
    rejected in a line each, not opened for reading (which blocks)."""
    report = shared_dir / "report"
    report.mkdir()
    os.chown(report, other_user.pw_uid, other_user.pw_gid)
    script = (
        'top=$(dirname "$XPU_PERF_CPU_OUT_DIR"); stat -c %u "$top" > "$0/owner"; '
        'if touch "$top/x" 2>/dev/null; then echo yes; else echo no; fi > "$0/created"; '
        'mkfifo "$XPU_PERF_CPU_OUT_DIR/cpu-999996.xpstream" "$XPU_PERF_NAMES_DIR/names-1.tsv"; '
        + BUSY
    )
    out = tmp_path / "rec.pftrace"
    env = _sudo_env(other_user, shared_dir)
    proc = _record(out, env, "sh", "-c", script, report, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rejected = [line for line in proc.stderr.splitlines() if line.startswith("xpu-perf: rejected")]
    assert len(rejected) == 2 and all(": a FIFO (" in line for line in rejected), proc.stderr
    assert (report / "owner").read_text().strip() == "0"
    assert (report / "created").read_text().strip() == "no"
    with open_trace(out) as trace:
        assert trace.scalar("select count(*) from perf_sample") > 0
    assert sorted(p.name for p in shared_dir.iterdir() if p.name.startswith("xpu-perf-")) == []


def _metadata(trace, key: str) -> object:
    return trace.scalar(f"select int_value from args where key = 'debug.{key}'")


def test_planted_fifo_and_symlinks_among_the_streams_are_rejected_not_read(
    other_user: pwd.struct_passwd, shared_dir: Path, tmp_path: Path
) -> None:
    """Root records a target that drops privileges to the other user (setpriv); that user
    plants, in its uid-N/ stream directory, a FIFO and a symlink to a root-only file named
    like streams, and a symlink in the Python names directory.  Record must not hang (it
    did, on the FIFO, after the target exited), must not read the root-only file, and says
    each rejected file in a line, counts them, and keeps the real samples."""
    secret = tmp_path / "root_only"
    secret.write_bytes(b"XPUPERF\0" + b"\0" * 64)  # a stream's magic: it would be read
    secret.chmod(0o600)
    script = (
        'd="$XPU_PERF_CPU_OUT_DIR/uid-$(id -u)"; mkfifo "$d/cpu-999999.xpstream"; '
        'ln -s "$0" "$d/cpu-999998.xpstream"; '
        'mkfifo "$XPU_PERF_NAMES_DIR/names-999997.tsv" 2>/dev/null; ' + BUSY
    )
    out = tmp_path / "rec.pftrace"
    user = f"--reuid={other_user.pw_uid}"
    group = f"--regid={other_user.pw_gid}"
    proc = _record(
        out,
        {"TMPDIR": str(shared_dir)},
        "setpriv", user, group, "--clear-groups", "sh", "-c", script, secret,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    rejected = [line for line in proc.stderr.splitlines() if line.startswith("xpu-perf: rejected")]
    assert len(rejected) == 2, proc.stderr
    assert any("cpu-999999.xpstream: a FIFO" in line for line in rejected), rejected
    assert any("cpu-999998.xpstream: a symlink" in line for line in rejected), rejected
    with open_trace(out) as trace:
        assert _metadata(trace, "cpu_streams_rejected") == 2
        assert trace.scalar("select count(*) from perf_sample") > 0
        # Nothing of the root-only file: the only process is the target's.
        assert trace.scalar("select count(*) from process where pid = 999998") == 0
