"""`xpu-perf` command line: one small module per subcommand under collector/commands/."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from collector import __version__
from collector.errors import UserError

# name -> module; each module has add_parser(subparsers) and main(args) -> int.
COMMANDS = ("record", "convert", "merge", "query", "folded", "view", "report", "flamegraph")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: with a command name first, only that command's module is
    imported (`record` then never loads the query engine's wasmtime, nor `query` the
    CUPTI source); without one (`--help`, a typo), every command's, for the listing."""
    parser = argparse.ArgumentParser(
        prog="xpu-perf",
        description="Perfetto-first CPU+GPU profiler and trace converter.",
        epilog="Run 'xpu-perf COMMAND --help' for the options of one command.",
    )
    parser.add_argument("--version", action="version", version=f"xpu-perf {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    first = next(iter(argv), None) if argv is not None else None
    for name in (first,) if first in COMMANDS else COMMANDS:
        try:
            module = importlib.import_module(f"collector.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"collector.commands.{name}":
                continue  # command not shipped in this build
            raise
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    try:
        parser = build_parser(argv)  # imports the command's module: Ctrl-C may land here
    except KeyboardInterrupt:
        print("xpu-perf: interrupted", file=sys.stderr)
        return 130
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except UserError as exc:
        print(f"xpu-perf {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"xpu-perf {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
