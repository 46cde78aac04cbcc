"""`xpu-perf view`: the offline Perfetto UI server, unit-level over HTTP and end to end in
headless Chromium (Debian's chromium; missing chromium fails these tests)."""

from __future__ import annotations

import html
import http.client
import http.server
import json
import os
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from collector import model
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.writer import TraceWriter
from exporters.report.ui_server import INTERNAL_USER_SCRIPT, serve_ui, start_in_thread
from tests.slice_batches import batched

from .browser import Chromium, is_local
from .conftest import REPO, run_cli
from .report_inputs import RecordedTrace, record_fake_gpu_app


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> RecordedTrace:
    return record_fake_gpu_app(tmp_path_factory.mktemp("view_rec"))


@dataclass(frozen=True)
class Served:
    """A running server: its origin (no secret) and the run's secret path prefix."""

    origin: str
    secret: str

    def __add__(self, path: str) -> str:
        """origin + the secret prefix + path: `served + "localtrace"`."""
        return f"{self.origin}{self.secret}/{path}"


@pytest.fixture
def served(example_trace: Path) -> Iterator[Served]:
    server = serve_ui(example_trace, port=0)
    start_in_thread(server)
    try:
        yield Served(server.origin, server.secret)
    finally:
        server.shutdown()
        server.server_close()


def _get(url: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_server_answers_the_ui_hooks_and_serves_the_trace(served: Served, example_trace: Path):
    status, _, body = _get(served + "vizviewer_info")
    assert status == 200 and json.loads(body) == {}
    status, _, body = _get(served + "localtrace")
    assert status == 200 and body == example_trace.read_bytes()
    status, headers, body = _get(served + "")
    assert status == 200 and b"Perfetto UI" in body
    # Everything the page may reach: this server alone (not the RPC port 9001, which any
    # local user can listen on).
    csp = headers["Content-Security-Policy"]
    assert "connect-src 'self' data: blob:" in csp and "9001" not in csp and "*" not in csp
    assert headers["Referrer-Policy"] == "no-referrer"  # the page's URL holds the secret


def test_server_rewrites_the_one_external_script(served: Served):
    status, _, index = _get(served + "")
    version = json.loads(index.split(b"data-perfetto_version='")[1].split(b"'")[0])["stable"]
    status, _, bundle = _get(served + f"{version}/frontend_bundle.js")
    assert status == 200 and len(bundle) > 1_000_000
    assert INTERNAL_USER_SCRIPT not in bundle
    assert b"https://storage.cloud.google.com" not in bundle
    # The UI's own requests are relative (they carry the secret prefix), and it never
    # probes the RPC port.
    assert b'fetch("/vizviewer_info")' not in bundle and b'"/live_reload"' not in bundle
    assert b"/localtrace`" not in bundle


def test_server_stays_inside_its_web_build(served: Served):
    for path in ("../../../../etc/passwd", "%2e%2e/%2e%2e/etc/passwd", "nonexistent.js"):
        status, _, body = _get(served + path)
        assert status == 404, path
        assert b"root:" not in body


def _get_with_host(url: str, path: str, host: str | None) -> tuple[int, bytes]:
    """GET `path` (under `url`'s path, the secret prefix) from `url`'s server as `host`."""
    parsed = urllib.parse.urlsplit(url)
    path = parsed.path.rstrip("/") + path
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_server_refuses_foreign_host_headers(served: Served, example_trace: Path):
    """DNS rebinding: a foreign site's name resolving to 127.0.0.1 sends its own Host (the
    secret in the URL does not help it)."""
    port = urllib.parse.urlsplit(served.origin).port
    served_url = served + ""
    trace = example_trace.read_bytes()
    for host in (
        "evil.example.com",
        f"evil.example.com:{port}",
        "127.0.0.1",
        f"127.0.0.1:{port + 1}",
        f"localhost.evil.example.com:{port}",
        None,
    ):
        for path in ("/localtrace", "/", "/vizviewer_info"):
            status, body = _get_with_host(served_url, path, host)
            assert status == 403, (host, path)
            assert trace[:64] not in body and b"Perfetto" not in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LocalHost:{port}"):
        status, body = _get_with_host(served_url, "/localtrace", host)
        assert status == 200 and body == trace, host
    # The page itself, asked for as localhost, moves to 127.0.0.1 (no analytics there).
    status, _ = _get_with_host(served_url, "/", f"localhost:{port}")
    assert status == 302


def test_view_errors_are_one_line(tmp_path: Path, example_trace: Path):
    not_trace = tmp_path / "notes.txt"
    not_trace.write_text("hello\n")
    for args, message in (
        ((tmp_path / "missing.perfetto-trace",), "no such trace file"),
        ((not_trace,), "not a trace file"),
        ((example_trace, "--port", "70000"), "--port must be"),
    ):
        proc = run_cli("view", "--no-open", *args)
        assert proc.returncode == 2, proc.stderr
        assert message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_view_port_in_use_is_one_line(example_trace: Path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_cli("view", "--no-open", "--port", str(port), example_trace)
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"xpu-perf view: error: port {port} is in use; pick another with --port"
    )


def _kernel_to_find(trace: Path) -> tuple[str, str, str, set[int]]:
    """The longest-running kernel whose instances all run on one stream (and whose name is
    no glob pattern, as the UI's search globs): name, its GPU, its stream, slice ids."""
    with open_trace(trace) as t:
        row = t.query(
            "select s.name, d.name as device, min(tr.name) as stream, "
            "group_concat(s.id) as ids from slice s "
            "join track tr on s.track_id = tr.id join track d on d.id = tr.parent_id "
            "where s.category = 'kernel' and s.name not glob '*[[*?]*' "
            "group by s.name having count(distinct tr.name) = 1 "
            "order by sum(s.dur) desc limit 1"
        )[0]
    return row["name"], row["device"], row["stream"], {int(i) for i in row["ids"].split(",")}


def _view_in_chromium(trace: Path, shot: Path, host: str = "127.0.0.1") -> None:
    name, device, stream, ids = _kernel_to_find(trace)
    gpu_label = device.split(" (")[0] + " ("  # "GPU 0 (": the UI may wrap the rest
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
        assert url.startswith("http://127.0.0.1:") and "/?code=" in url
        url = url.replace("127.0.0.1", host, 1)
        with Chromium(width=1600, height=1000) as browser:
            browser.navigate(url)
            # Track names come from the UI's own engine: they appear once the trace loaded.
            browser.wait_for(
                f"document.body.innerText.includes({json.dumps(gpu_label)})",
                timeout=90,
                what="the GPU track in the Perfetto UI",
            )
            # Find the kernel with the omnibox search: Enter runs the search ("0 / 2": two
            # matches, none selected yet), the next Enter selects the first match, which
            # expands its GPU, scrolls to its stream and opens the slice's details.
            details = _search_and_select(browser, name)
            browser.screenshot(shot)
            assert details, "the search never selected the kernel (see the screenshot)"
            assert f"Name\n{name}\n" in details
            selected = int(details.split("slice[", 1)[1].split("]", 1)[0])
            assert selected in ids  # the UI selected one of this kernel's slices
            assert stream in details.split("\n")  # its stream track, now expanded
            assert gpu_label in details
            assert browser.log.exceptions == []
            off_machine = [u for u in browser.log.requests if not is_local(u)]
            assert off_machine == []
            assert any(u.endswith("/localtrace") for u in browser.log.requests)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


# What the omnibox search did: 'selected:<page text>' once a kernel's details show,
# 'searched' when matches are counted but none is selected, '' while it is still working.
_SEARCH_STATE_JS = """(() => {
  const text = document.body.innerText;
  if (text.includes('Category\\n%s') && text.includes('SQL ID')) return 'selected:' + text;
  const bar = document.querySelector('.pf-omnibox');
  return bar && /\\b0 \\/ \\d+/.test(bar.parentElement.innerText) ? 'searched' : '';
})()"""


def _search_and_select(
    browser: Chromium, name: str, attempts: int = 8, category: str = "kernel"
) -> str:
    """Page text once the searched kernel is selected ('' if it never is).

    The UI keeps re-rendering for a moment after the tracks appear and may drop the
    omnibox's focus and text, or ignore an early Enter; so every attempt first makes sure
    the text is (still) in the focused omnibox, and Enter is pressed again when nothing is
    selected after a few seconds.
    """
    for _ in range(attempts):
        _type_into_omnibox(browser, name)
        _press_enter(browser)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            state = browser.evaluate(_SEARCH_STATE_JS % category)
            if state.startswith("selected:"):
                return state.removeprefix("selected:")
            if state == "searched":
                break  # matches counted, none selected: the next Enter selects
            time.sleep(0.25)
    return ""


def _type_into_omnibox(browser: Chromium, text: str) -> None:
    ready = (
        "(() => { const i = document.querySelector('.pf-omnibox input');"
        f" return !!i && i.value === {json.dumps(text)} && document.activeElement === i; }})()"
    )
    if browser.evaluate(ready):
        return
    # Focus and select what is there, so typing replaces it.
    browser.wait_for(
        "(() => { const i = document.querySelector('.pf-omnibox input');"
        " if (!i) return false; i.focus(); i.select(); return document.activeElement === i; })()",
        what="the omnibox",
    )
    browser.call("Input.insertText", {"text": text})
    browser.wait_for(ready, timeout=10, what="the search text in the omnibox")


def _press_enter(browser: Chromium) -> None:
    for kind in ("rawKeyDown", "char", "keyUp"):
        key = {"type": kind, "key": "Enter", "code": "Enter", "windowsVirtualKeyCode": 13}
        if kind == "char":
            key["text"] = "\r"
        browser.call("Input.dispatchKeyEvent", key)


def test_view_kineto_trace_in_chromium(example_trace: Path, tmp_path: Path):
    _view_in_chromium(example_trace, tmp_path / "view_kineto.png")


def test_view_on_localhost_in_chromium(example_trace: Path, tmp_path: Path):
    """The Host check lets the UI load under its other loopback name too."""
    _view_in_chromium(example_trace, tmp_path / "view_localhost.png", host="localhost")


def test_view_recorded_trace_in_chromium(recorded: RecordedTrace, tmp_path: Path):
    _view_in_chromium(recorded.path, tmp_path / "view_recorded.png")


# A trace whose counts are known: timer samples and, more numerous (one per API call, as in
# a launch-bound training step), launch stacks.
TIMER_SAMPLES = 120
API_CALLS = 300
_LAUNCH = model.Stack(
    (
        model.Frame("main", "/bin/train", 0x10),
        model.Frame("train_step (train.py:10)", "/w/train.py", 10),
        model.Frame("forward (model.py:42)", "/w/model.py", 42),
        model.Frame("PyObject_Call", "/usr/lib/libpython3.12.so.1.0", 0x20),  # hidden
        model.Frame("linear (functional.py:7)", "/w/functional.py", 7),
        model.Frame("cudaLaunchKernel", "/usr/lib/libcudart.so.12", 0x30),
    )
)
_BURN = model.Stack(
    (
        model.Frame("main", "/bin/train", 0x10),
        model.Frame("train_step (train.py:10)", "/w/train.py", 10),
        model.Frame("burn (train.py:3)", "/w/train.py", 3),
    )
)


def _samples_and_launches_trace(path: Path) -> Path:
    pid = 7
    events: list[model.Event] = [
        model.ProcessInfo(pid, "train"),
        model.ThreadInfo(pid, pid, "main"),
        model.GpuDevice(0, "H100"),
    ]
    events += [
        model.CpuSample(pid, pid, 1_000_000 + i * 1_000_000, _BURN, cpu=0)
        for i in range(TIMER_SAMPLES)
    ]
    for i in range(API_CALLS):
        ts = 1_000_000 + i * 400_000 + 123  # not on a microsecond: the ns rest must survive
        flow = model.flow_id(pid, i + 1)
        events.append(
            model.CpuSlice(
                pid,
                pid,
                ts,
                5_000,
                "cudaLaunchKernel",
                "cuda_api",
                {"correlation_id": i + 1},
                flow_ids=(flow,),
                launch_stack=_LAUNCH,
            )
        )
        events.append(
            model.GpuOp(
                0,
                7,
                ts + 20_000,
                50_000,
                "gemm_kernel",
                "kernel",
                correlation_id=i + 1,
                terminating_flow_ids=(flow,),
            )
        )
    events.sort(key=lambda e: getattr(e, "ts", 0))
    with TraceWriter(path, sample_frequency_hz=999) as writer:
        writer.producer("test").write_all(batched(events))
    return path


def _flamegraph_root(browser: Chromium) -> str:
    """The tooltip of the flamegraph's root in the details panel: the UI draws the graph on
    a canvas, so the mouse goes over the root row (just under the Top Down / Bottom Up
    switch) and the tooltip's text is read."""
    top = browser.wait_for(
        "(() => { const e = [...document.querySelectorAll('button, span, div')]"
        ".find(e => e.innerText === 'Top Down'); if (!e) return null;"
        " const r = e.getBoundingClientRect(); return r.y + r.height; })()",
        what="the flamegraph's Top Down switch",
    )
    text = ""
    # The tooltip follows a redraw of the canvas, slower on a loaded machine: a few rounds.
    for dy in (14, 20, 10) * 3:
        browser.call("Input.dispatchMouseEvent", {"type": "mouseMoved", "x": 60, "y": top + dy})
        time.sleep(0.5)
        text = browser.evaluate("document.body.innerText")
        if "Cumulative:" in text:
            return text.split("Cumulative:", 1)[1].strip().split("\n", 1)[0]
    return ""


def test_ui_flamegraph_counts_timer_samples_and_api_slice_shows_launch_stack(tmp_path: Path):
    """In the UI `view` serves: the CPU flamegraph it opens on load (the process's perf
    samples) counts the timer samples only, not the launch stacks (one per API call, more
    numerous here); the API slice's details show the frames of its launch stack, innermost
    first, with CPython's call machinery between Python frames hidden."""
    trace = _samples_and_launches_trace(tmp_path / "samples_and_launches.perfetto-trace")
    # The whole run: the flamegraph the UI opens with covers the window it opens on.
    command = ["view", "--no-open", "--port", "0", "--span", "all", str(trace)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", *command],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().rsplit(": ", 1)[1].strip()
        with Chromium(width=1600, height=1000) as browser:
            browser.navigate(url)
            browser.wait_for(
                "document.body.innerText.includes('Perf Sample Flamegraph')",
                timeout=90,
                what="the CPU flamegraph the UI opens on load",
            )
            root = _flamegraph_root(browser)
            browser.screenshot(tmp_path / "view_cpu_flamegraph.png")
            assert root == f"{TIMER_SAMPLES}, 100.00%", root  # not {TIMER_SAMPLES + API_CALLS}
            details = _search_and_select(browser, "cudaLaunchKernel", category="cuda_api")
            browser.evaluate(  # the args are below the panel's fold: bring them up
                "[...document.querySelectorAll('*')].find(e => e.childElementCount === 0"
                " && e.textContent === 'Arguments')?.scrollIntoView()"
            )
            browser.screenshot(tmp_path / "view_api_launch_stack.png")
            assert details, "the search never selected the API call (see the screenshot)"
            shown = (
                "cudaLaunchKernel <- linear (functional.py:7) <- forward (model.py:42) "
                "<- train_step (train.py:10) <- main"
            )
            # The args table: the key (with the UI's menu icon's name), then the value.
            assert f"launch_stackarrow_drop_down\n{shown}\n" in details, details[-1500:]
            assert browser.log.exceptions == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)


class _ForeignHandler(http.server.BaseHTTPRequestHandler):
    server: _ForeignServer

    def do_GET(self) -> None:
        self.server.seen.append(f"{self.requestline}\n{self.headers}")
        body = b"<!doctype html><title>other</title>another user's server"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class _ForeignServer(http.server.ThreadingHTTPServer):
    """Another server on 127.0.0.1 (any local user may run one): what the browser sends it."""

    daemon_threads = True

    def __init__(self) -> None:
        self.seen: list[str] = []  # request line and headers of each request
        super().__init__(("127.0.0.1", 0), _ForeignHandler)


def test_view_secret_reaches_no_other_port_nor_a_command_line(example_trace: Path, tmp_path: Path):
    """The browser is started with a launcher page's name (its command line is
    world-readable), which sends it on with a one-time code; the UI then lives under a
    secret path, with no cookie: another server on 127.0.0.1 (cookies are per host, not per
    port) is sent nothing of it, the UI never talks to the RPC port 9001, and the spent code
    and the old `?token=` form open nothing."""
    name, device, _, _ = _kernel_to_find(example_trace)
    gpu_label = device.split(" (")[0] + " ("
    browser_arg = tmp_path / "browser_arg"
    fake_browser = tmp_path / "fake-browser"
    fake_browser.write_text(f'#!/bin/sh\nprintf %s "$1" > {browser_arg}\n')
    fake_browser.chmod(0o755)
    run_tmp = tmp_path / "run_tmp"
    run_tmp.mkdir()
    env = {**os.environ, "DISPLAY": ":99", "BROWSER": str(fake_browser), "TMPDIR": str(run_tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "collector.cli", "view", "--port", "0", str(example_trace)],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    foreign = _ForeignServer()
    threading.Thread(target=foreign.serve_forever, daemon=True).start()
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("Perfetto UI with "), first + proc.stderr.read()
        printed = first.rsplit(": ", 1)[1].strip()
        origin = printed.split("?", 1)[0]
        deadline = time.monotonic() + 30
        while not browser_arg.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        launcher = browser_arg.read_text()
        # What the browser's command line holds: a file only this user can read.
        assert launcher.startswith("file:///") and "code=" not in launcher, launcher
        page = Path(urllib.parse.unquote(launcher.removeprefix("file://")))
        assert stat.S_IMODE(page.stat().st_mode) == 0o600
        assert stat.S_IMODE(page.parent.stat().st_mode) == 0o700
        launcher_code_url = page.read_text().split("url=", 1)[1].split('"', 1)[0]
        launcher_code_url = html.unescape(launcher_code_url)
        assert launcher_code_url.startswith(origin + "?code=") and launcher_code_url != printed
        with Chromium(width=1600, height=1000) as browser:
            browser.navigate(launcher)
            browser.wait_for(
                f"document.body.innerText.includes({json.dumps(gpu_label)})",
                timeout=90,
                what="the GPU track in the Perfetto UI",
            )
            assert _search_and_select(browser, name), "the UI did not show the kernel"
            location = browser.evaluate("location.href")
            assert location.startswith(origin), location
            secret = location.removeprefix(origin).split("/", 1)[0]
            assert len(secret) >= 32, location
            # Another user's server on another port of 127.0.0.1, visited next.
            other = f"http://127.0.0.1:{foreign.server_address[1]}/page"
            browser.navigate(other)
            browser.wait_until(lambda: bool(foreign.seen), what="the other server's request")
            codes = [printed.split("=", 1)[1], launcher_code_url.split("=", 1)[1]]
            for request in foreign.seen:
                assert "cookie:" not in request.lower(), request
                for value in (secret, *codes):
                    assert value not in request, request
            # Never the RPC port: the UI's probe is off, and the CSP would refuse it.
            assert [u for u in browser.log.requests if ":9001" in u] == []
            assert browser.log.exceptions == []
        # The launcher's code was spent by the browser: it opens nothing now.
        assert _get(launcher_code_url)[0] == 403
        # The printed URL opens once (a redirect to the secret prefix), then never again.
        status, _, _ = _get_no_redirect(printed)
        assert status == 302
        assert _get(printed)[0] == 403
        # A replayed secret in the old `?token=` form, or the trace without the prefix: no.
        for path in (f"?token={secret}", f"localtrace?token={secret}", "localtrace"):
            status, _, body = _get(origin + path)
            assert status == 403 and len(body) < 200, path
        assert _get(f"{origin}{secret}/localtrace")[2] == example_trace.read_bytes()
    finally:
        foreign.shutdown()
        foreign.server_close()
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "one-time code was already used" in err, err  # the user is told of a replay
    assert list(run_tmp.iterdir()) == []  # the launcher page is gone with the view


def _get_no_redirect(url: str) -> tuple[int, dict[str, str], bytes]:
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=30)
    try:
        conn.request("GET", f"{parsed.path}?{parsed.query}")
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()
