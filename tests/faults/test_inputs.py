"""Issue 21, inputs and `view`: an unreadable, directory, FIFO or truncated input is one line
and a non-zero status (never a traceback, never a hang); `view` serves nothing without its
run's secret, whoever asks."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

from ..conftest import REPO
from .support import NOBODY, assert_one_line_error, cli, cli_as, make_fifo, nobody_cache, python_as


def _root_only_copy(trace: Path, directory: Path, name: str = "secret.pftrace") -> Path:
    copy = directory / name
    shutil.copy(trace, copy)
    copy.chmod(0o600)  # root's, mode 600: nobody may not read it
    return copy


@pytest.mark.parametrize(
    "args",
    [
        ("query", "{trace}", "select 1"),
        ("folded", "{trace}"),
        ("report", "{trace}"),
        ("flamegraph", "{trace}", "-o", "{dir}/f.svg"),
        ("view", "--no-open", "--port", "0", "{trace}"),
    ],
    ids=lambda a: a[0],
)
def test_an_unreadable_trace_is_one_line_as_nobody(
    args: tuple[str, ...], example_trace: Path, shared_dir: Path
) -> None:
    trace = _root_only_copy(example_trace, shared_dir)
    out_dir = shared_dir / "out"
    out_dir.mkdir(mode=0o777)
    out_dir.chmod(0o777)
    argv = [a.format(trace=trace, dir=out_dir) for a in args]
    proc = cli_as(NOBODY, *argv, env=nobody_cache(shared_dir), timeout=120)
    assert_one_line_error(proc, "permission denied", str(trace))
    assert proc.stdout == ""
    assert os.listdir(out_dir) == []


def test_a_batch_query_reports_the_unreadable_trace_and_answers_for_the_others(
    example_trace: Path, shared_dir: Path
) -> None:
    batch = shared_dir / "batch"
    batch.mkdir()
    batch.chmod(0o755)
    shutil.copy(example_trace, batch / "a.pftrace")
    (batch / "a.pftrace").chmod(0o644)
    _root_only_copy(example_trace, batch, "b.pftrace")
    proc = cli_as(
        NOBODY,
        "query",
        batch,
        "select count(*) as slices from slice",
        "--format",
        "csv",
        "-j",
        "1",
        env=nobody_cache(shared_dir),
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"xpu-perf query: error: {batch / 'b.pftrace'}: cannot read {batch / 'b.pftrace'}: "
        "Permission denied"
    ]
    rows = proc.stdout.strip().splitlines()
    assert rows[0] == "trace,slices"
    assert len(rows) == 2 and rows[1].startswith(f"{batch / 'a.pftrace'},")
    assert int(rows[1].rsplit(",", 1)[1]) > 0


@pytest.mark.parametrize("command", ["query", "folded", "report", "view", "convert", "merge"])
def test_a_directory_or_fifo_input_says_what_it_is(command: str, tmp_path: Path) -> None:
    directory = tmp_path / "dir.pftrace"
    directory.mkdir()
    fifo = make_fifo(tmp_path / "fifo.pftrace")
    for path, said in ((directory, "is a directory"), (fifo, "not a regular file")):
        args: list[str | Path] = {
            "query": ["query", path, "select 1"],
            "folded": ["folded", path],
            "report": ["report", path],
            "view": ["view", "--no-open", "--port", "0", path],
            "convert": ["convert", path, "-o", tmp_path / "out.pftrace"],
            "merge": ["merge", path, "-o", tmp_path / "out.pftrace"],
        }[command]
        if command == "query" and path == directory:
            continue  # a directory is query's batch form (test_batch_query.py)
        try:
            proc = cli(*args, timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{command} blocked on {path}")
        assert_one_line_error(proc, said)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir.pftrace", "fifo.pftrace"]


def test_view_refuses_a_truncated_trace(example_trace: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "cut.pftrace"
    truncated.write_bytes(example_trace.read_bytes()[:-100])
    # The other commands refuse it; view must too, not serve it as if it were whole.
    assert_one_line_error(cli("query", truncated, "select 1"), "truncated")
    try:
        proc = cli("view", "--no-open", "--port", "0", truncated, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("view served a truncated trace")
    assert_one_line_error(proc, "truncated")


_FETCH = """
import http.client, sys, urllib.parse
url, path, cookie = sys.argv[1], sys.argv[2], sys.argv[3]
parts = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
conn.putrequest("GET", path)
if cookie:
    conn.putheader("Cookie", cookie)
conn.endheaders()
r = conn.getresponse()
body = r.read()
print(r.status, len(body), r.getheader("Location") or "-", r.getheader("Set-Cookie") or "-")
"""


def test_view_serves_nothing_without_the_runs_secret(example_trace: Path, shared_dir: Path):
    trace = _root_only_copy(example_trace, shared_dir)
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "view", "--no-open", "--port", "0", str(trace)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("Perfetto UI with "), first + proc.stderr.read()
        url = first.rsplit(": ", 1)[1].strip()
        parts = urllib.parse.urlsplit(url)
        code = urllib.parse.parse_qs(parts.query).get("code", [""])[0]
        assert len(code) >= 32, url  # a one-time code, printed in the URL to open
        size = trace.stat().st_size

        def fetch(uid: int, path: str, cookie: str = "") -> tuple[int, int, str, str]:
            run = python_as(uid, _FETCH, url, path, cookie, timeout=60)
            assert run.returncode == 0, run.stderr
            status, length, location, set_cookie = run.stdout.split(" ", 3)
            return int(status), int(length), location, set_cookie.strip()

        # Another local user, without the code or the secret: nothing, not the trace nor
        # the UI.
        for path in ("/localtrace", "/vizviewer_info", "/", "/index.html"):
            status, length, _, _ = fetch(NOBODY, path)
            assert status == 403, path
            assert length < 100
        wrong = "x" * len(code)
        for path in (f"/?code={wrong}", f"/{wrong}/localtrace", f"/localtrace?token={wrong}"):
            assert fetch(NOBODY, path)[0] == 403, path
        port = parts.port
        assert fetch(NOBODY, "/localtrace", f"xpu_perf_view_{port}={wrong}")[0] == 403
        # The user with the URL: its code is spent for a redirect to the secret prefix,
        # with no cookie (another 127.0.0.1 port would be sent it).
        status, _, location, set_cookie = fetch(0, f"/?code={code}")
        assert status == 302 and set_cookie == "-", (status, set_cookie)
        prefix = urllib.parse.urlsplit(location).path
        # (What follows '#' is the UI's route, where it opens: it never reaches a server.)
        assert location.split("#")[0] == f"{parts.scheme}://{parts.netloc}{prefix}", location
        assert len(prefix.strip("/")) >= 32 and code not in prefix
        assert fetch(0, f"{prefix}localtrace")[:2] == (200, size)
        assert fetch(0, f"{prefix}vizviewer_info")[0] == 200
        # The code opens once: not for the user again, nor for anyone who saw it since.
        assert fetch(0, f"/?code={code}")[0] == 403
        assert fetch(NOBODY, f"/?code={code}")[0] == 403
        # The secret prefix is the key, whoever holds it.
        assert fetch(NOBODY, f"{prefix}localtrace")[:2] == (200, size)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
