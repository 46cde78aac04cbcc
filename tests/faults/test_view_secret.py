"""Issue 34 S2: `view` opens the browser without its secret on the command line.

A browser's command line is world-readable (/proc/PID/cmdline): with the URL and its token
there, another local user read it and downloaded a root-only trace.  Here a stand-in
browser (started by `view` through $BROWSER, as `webbrowser` starts any browser) opens what
it was given as a browser would, and stays running; a second user, created for the test,
reads its command line and tries everything found there.
"""

from __future__ import annotations

import json
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..conftest import REPO
from .support import kill_quietly, python_as, require_root

# Opens what a command line names as a browser would, with the standard library only (the
# second user's interpreter cannot import more once its privileges are gone): an http URL
# is fetched, redirects followed; a file:// page is read and the URLs in it are fetched.
# Then the trace is asked for where the page ended (`localtrace` beside it, the page's
# query kept).  Prints what each step got.
_BROWSE = r"""
import json, re, sys, urllib.error, urllib.parse, urllib.request

def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, r.geturl(), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, url, b""
    except OSError as exc:
        return str(exc), url, b""

def browse(arg):
    steps, urls = [], []
    if arg.startswith("http"):
        urls.append(arg)
    elif arg.startswith("file://"):
        try:
            with open(urllib.parse.unquote(arg[len("file://"):]), encoding="utf-8") as f:
                urls += dict.fromkeys(re.findall(r"https?://[^\"'<> ]+", f.read()))
        except OSError as exc:
            steps.append(["read", arg, exc.strerror])
    for url in urls:
        status, final, _ = fetch(url)
        steps.append(["page", url, status])
        query = urllib.parse.urlsplit(url).query
        trace_url = urllib.parse.urljoin(final, "localtrace") + (f"?{query}" if query else "")
        status, _, body = fetch(trace_url)
        steps.append(["trace", trace_url, status, len(body)])
    return steps
"""

# The user's browser: opens its argument, says what it got, then stays running (its
# command line readable meanwhile) until the test ends it.
_BROWSER = (
    _BROWSE
    + r"""
import os, time
print(json.dumps({"pid": os.getpid(), "steps": browse(sys.argv[1])}), flush=True)
time.sleep(300)
"""
)

# The other user: everything on the browser's command line.
_ATTACKER = (
    _BROWSE
    + r"""
with open(f"/proc/{sys.argv[1]}/cmdline", "rb") as f:
    args = [a.decode() for a in f.read().split(b"\0") if a]
print(json.dumps({"args": args, "steps": [s for a in args for s in browse(a)]}))
"""
)


@pytest.fixture
def other_user() -> Iterator[int]:
    """A second, unprivileged local user, created for the test and removed after it."""
    require_root()
    name = f"xpuview{secrets.token_hex(4)}"
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    try:
        yield pwd.getpwnam(name).pw_uid
    finally:
        subprocess.run(["userdel", name], check=False, capture_output=True)


def test_view_keeps_its_secret_off_the_browsers_command_line(
    example_trace: Path, shared_dir: Path, tmp_path: Path, other_user: int
) -> None:
    trace = shared_dir / "secret.pftrace"
    shutil.copy(example_trace, trace)
    trace.chmod(0o600)  # root's alone
    size = trace.stat().st_size
    browser_out = tmp_path / "browser.json"
    browser_script = tmp_path / "browse.py"
    browser_script.write_text(_BROWSER)
    fake_browser = tmp_path / "browser"
    # As `webbrowser` expects of a browser: it returns at once, the browser runs on.
    fake_browser.write_text(
        f'#!/bin/sh\n"{sys.executable}" "{browser_script}" "$1" > "{browser_out}" 2>&1 &\n'
    )
    fake_browser.chmod(0o755)
    env = {
        **os.environ,
        "DISPLAY": ":99",
        "BROWSER": str(fake_browser),
        "TMPDIR": str(shared_dir),  # every user may enter it: only the launcher's modes hold
    }
    view = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "view", "--port", "0", str(trace)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    browser_pid = 0
    try:
        opened = json.loads(_first_line(browser_out, view))
        browser_pid = opened["pid"]
        # The user's browser gets the trace.
        assert ["trace", opened["steps"][-1][1], 200, size] == opened["steps"][-1], opened
        seen = python_as(other_user, _ATTACKER, str(browser_pid), timeout=120)
        assert seen.returncode == 0, seen.stderr
        attempt = json.loads(seen.stdout)
        # It did read the browser's command line, and what the browser was given.
        assert attempt["args"][-1].startswith(("http", "file:")), attempt
        # Nothing on it opens the trace (nor the UI) for the other user.
        for step in attempt["steps"]:
            assert step[0] == "read" or step[2] != 200, attempt
        assert attempt["steps"], attempt
    finally:
        if browser_pid:
            kill_quietly(browser_pid)
        view.send_signal(signal.SIGTERM)
        view.communicate(timeout=30)


def _first_line(path: Path, view: subprocess.Popen[str], timeout: float = 60) -> str:
    """The first whole line the browser writes to `path`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.endswith("\n"):
            return text.splitlines()[0]
        if view.poll() is not None:
            pytest.fail(f"view exited: {view.communicate()}")
        time.sleep(0.1)
    pytest.fail(f"the browser said nothing within {timeout} s: {text!r}")
