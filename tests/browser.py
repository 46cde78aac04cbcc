"""Headless Chromium (Debian's `chromium`) driven over the Chrome DevTools Protocol.

Plain CDP over one websocket (websocket-client) instead of Playwright: nothing to download
beyond Debian's browser, no driver process, and no browser/driver version pairing to break.
One page per `Chromium`; every console message, uncaught exception and network request of
that page is recorded so tests can assert on them.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import websocket

CHROMIUM_CANDIDATES = ("chromium", "chromium-browser", "google-chrome")
# Where tests copy screenshots so a CI run keeps them (git-ignored).
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"


class BrowserError(AssertionError):
    """The browser could not be started or driven (fails the test, never skips it)."""


def find_chromium() -> str:
    for name in CHROMIUM_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserError(
        "no chromium found: the browser tests need Debian's chromium; "
        "run 'sudo bash scripts/setup_browser.sh' (scripts/setup.sh does it as root)"
    )


@dataclass
class PageLog:
    """What the page did: console errors, uncaught exceptions, requested URLs."""

    console_errors: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)

    def errors(self) -> list[str]:
        return self.console_errors + self.exceptions

    def record(self, method: str, params: dict[str, Any]) -> None:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            args = params.get("args", [])
            self.console_errors.append(
                " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            )
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            exc = details.get("exception", {})
            self.exceptions.append(str(exc.get("description") or details.get("text")))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") == "error":
                self.console_errors.append(f"{entry.get('text')} ({entry.get('url', '')})")
        elif method == "Network.requestWillBeSent":
            self.requests.append(params.get("request", {}).get("url", ""))
        elif method == "Network.loadingFailed":
            self.failed_requests.append(
                f"{params.get('errorText')} {params.get('blockedReason') or ''}".strip()
            )


class Chromium:
    """One headless Chromium with one page.  Use as a context manager."""

    def __init__(self, width: int = 1600, height: int = 1000) -> None:
        self._binary = find_chromium()
        self._profile = Path(tempfile.mkdtemp(prefix="xpu-perf-chromium-"))
        self._stderr = (self._profile / "stderr.log").open("wb")
        self.log = PageLog()
        self._next_id = 0
        self._proc = subprocess.Popen(
            [
                self._binary,
                "--headless=new",
                "--remote-debugging-port=0",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                # Root in a container has no usable sandbox; the pages are our own files.
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                # Keep the browser's own background traffic (updates, sync, safe browsing)
                # off, so what the page requests is all the network there is.
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        try:
            self._ws = websocket.create_connection(self._page_ws_url(), timeout=60)
            for domain in ("Page", "Runtime", "Log", "Network"):
                self.call(f"{domain}.enable")
        except BaseException:
            self.close()
            raise

    # -- start-up ---------------------------------------------------------------------------

    def _page_ws_url(self) -> str:
        # With --remote-debugging-port=0 Chromium picks a port and writes it to this file.
        port_file = self._profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrowserError(f"chromium exited with {self._proc.returncode}: {self._tail()}")
            if port_file.exists():
                lines = port_file.read_text().split()
                if lines:
                    with urllib.request.urlopen(f"http://127.0.0.1:{lines[0]}/json/list") as r:
                        targets = json.load(r)
                    pages = [t for t in targets if t.get("type") == "page"]
                    if pages:
                        return str(pages[0]["webSocketDebuggerUrl"])
            time.sleep(0.1)
        raise BrowserError(f"chromium did not open its DevTools port: {self._tail()}")

    def _tail(self) -> str:
        self._stderr.flush()
        text = (self._profile / "stderr.log").read_text(errors="replace")
        return text[-2000:]

    # -- protocol ---------------------------------------------------------------------------

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 60) -> Any:
        """Send one command and wait for its reply; events read meanwhile go to the log."""
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params or {}}))
        deadline = time.monotonic() + timeout
        while True:
            self._ws.settimeout(max(0.1, deadline - time.monotonic()))
            try:
                msg = json.loads(self._ws.recv())
            except websocket.WebSocketTimeoutException:
                raise BrowserError(f"no reply to {method} within {timeout} s") from None
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise BrowserError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            if "method" in msg:
                self.log.record(msg["method"], msg.get("params", {}))

    def evaluate(self, expression: str, timeout: float = 60) -> Any:
        """Value of a JS expression in the page (promises awaited)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout=timeout,
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"JS error in {expression[:80]!r}: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def navigate(self, url: str) -> None:
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise BrowserError(f"cannot load {url}: {result['errorText']}")

    def wait_for(
        self, expression: str, timeout: float = 60, what: str = "", poll: float = 0.25
    ) -> Any:
        """Poll a JS expression until it is truthy; its value.  Errors while polling (the
        page still loading, a navigation replacing the context) count as not yet."""
        deadline = time.monotonic() + timeout
        error = ""
        while time.monotonic() < deadline:
            try:
                value = self.evaluate(expression)
            except BrowserError as exc:
                error = f" (last error: {exc})"
            else:
                if value:
                    return value
            time.sleep(poll)
        raise BrowserError(f"timed out after {timeout} s waiting for {what or expression}{error}")

    def wait_until(self, check: Callable[[], bool], timeout: float = 60, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            self.evaluate("1")  # pumps events into the log
            time.sleep(0.25)
        raise BrowserError(f"timed out after {timeout} s waiting for {what}")

    def screenshot(self, path: Path) -> Path:
        """PNG of the viewport to `path`, and a copy under tests/artifacts/."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        ARTIFACTS.mkdir(exist_ok=True)
        shutil.copy(path, ARTIFACTS / path.name)
        return path

    def screen_stats(self, png: Path) -> ScreenStats:
        """What a screenshot shows, decoded by the browser itself (no image library here):
        its size, how many colours, and the share of pixels not of its commonest colour."""
        data = base64.b64encode(png.read_bytes()).decode("ascii")
        raw = self.evaluate(_SCREEN_STATS_JS.replace("PNG_BASE64", data))
        return ScreenStats(**raw)

    # -- teardown ---------------------------------------------------------------------------

    def close(self) -> None:
        ws = getattr(self, "_ws", None)
        if ws is not None:
            ws.close()
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._stderr.close()
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Chromium:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class ScreenStats:
    width: int
    height: int
    colours: int  # distinct colours
    inked: float  # share of the pixels that differ from the commonest colour (the background)


# Runs in the page under test (any document: OffscreenCanvas needs no DOM of HTML).
_SCREEN_STATS_JS = """(async () => {
  const bytes = Uint8Array.from(atob('PNG_BASE64'), c => c.charCodeAt(0));
  const bitmap = await createImageBitmap(new Blob([bytes], {type: 'image/png'}));
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const ctx = canvas.getContext('2d');
  ctx.drawImage(bitmap, 0, 0);
  const px = new Uint32Array(ctx.getImageData(0, 0, bitmap.width, bitmap.height).data.buffer);
  const counts = new Map();
  for (const p of px) counts.set(p, (counts.get(p) || 0) + 1);
  const commonest = Math.max(...counts.values());
  return {width: bitmap.width, height: bitmap.height, colours: counts.size,
          inked: 1 - commonest / px.length};
})()"""


def is_local(url: str) -> bool:
    """file:, data:, blob:, about: or http(s)/ws to the loopback interface."""
    if url.startswith(("file:", "data:", "blob:", "about:")):
        return True
    host = urlsplit(url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")
