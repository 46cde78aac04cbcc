"""`xpu-perf` command line: one small module per subcommand under collector/commands/."""

from __future__ import annotations

import argparse
import difflib
import errno
import importlib
import os
import sys
from collections.abc import Sequence

from collector import __version__
from collector.cli_text import FINDINGS_IN_WORDS
from collector.errors import Terminated, UserError
from collector.files import terminate_on_sigterm
from collector.visible_text import printable_lines

# name -> module; each module has add_parser(subparsers) and main(args) -> int.
COMMANDS = ("record", "convert", "merge", "query", "folded", "view", "report", "flamegraph")


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for `argv`: with a command name first, only that command's module is
    imported (`record` then never loads the query engine's wasmtime, nor `query` the
    CUPTI source); without one (`--help`, a typo), every command's, for the listing."""
    parser = argparse.ArgumentParser(
        prog="xpu-perf",
        description="Perfetto-first CPU+GPU profiler and trace converter. `record` a program "
        "(or `convert` a torch.profiler trace), then `report` it: ranked findings, each with "
        "the time it explains, the code to change and how (" + FINDINGS_IN_WORDS + ").",
        epilog="Run 'xpu-perf COMMAND --help' for the options of one command.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.description = _wrapped(parser.description or "")
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
    _check_command(parser, argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _unrecognized(parser, args, extra)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    terminate_on_sigterm()  # a `kill` runs the cleanups (temporary outputs) too
    try:
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a full disk behind `> file` shows here, not at exit
        return code
    except UserError as exc:
        # The message may quote an input (a name, a JSON error's bytes): shown visibly.
        print(printable_lines(f"xpu-perf {args.command}: error: {exc}"), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"xpu-perf {args.command}: interrupted", file=sys.stderr)
        return 130
    except Terminated as exc:
        print(f"xpu-perf {args.command}: terminated by signal {exc.signum}", file=sys.stderr)
        return 128 + exc.signum
    except BrokenPipeError:
        _drop_stdout()
        return 0
    except OSError as exc:
        # The last resort: the commands turn the errors they expect into UserErrors; any
        # other (a full disk under stdout, a file gone mid-run) is still one line.
        print(
            printable_lines(f"xpu-perf {args.command}: error: {_os_error_line(exc)}"),
            file=sys.stderr,
        )
        _drop_stdout()
        return 1


def _wrapped(text: str) -> str:
    import textwrap

    return textwrap.fill(" ".join(text.split()), width=min(100, _columns()))


def _columns() -> int:
    try:
        return max(40, int(os.environ.get("COLUMNS", "")))
    except ValueError:
        return 80


def _check_command(parser: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """A mistyped command names the nearest one (argparse only lists them all)."""
    first = next(iter(argv), None)
    if first is None or first.startswith("-") or first in COMMANDS:
        return
    near = difflib.get_close_matches(first, COMMANDS, n=1)
    hint = f"; did you mean '{near[0]}'?" if near else f" (one of: {', '.join(COMMANDS)})"
    parser.error(f"unknown command '{first}'{hint}")


def _unrecognized(
    parser: argparse.ArgumentParser, args: argparse.Namespace, extra: list[str]
) -> None:
    """Arguments no option of the command knows: said by the command's own parser (its
    usage, not the top level's), with the nearest of its flags for each mistyped one."""
    sub = _subparser(parser, getattr(args, "command", None)) or parser
    flags = [o for action in sub._actions for o in action.option_strings]
    hints = []
    for arg in extra:
        name = arg.split("=", 1)[0]
        if name.startswith("-"):
            near = difflib.get_close_matches(name, flags, n=1, cutoff=0.6)
            if near:
                hints.append(f"did you mean {near[0]}?")
    message = f"unrecognized arguments: {' '.join(extra)}"
    sub.error(message + ("; " + " ".join(hints) if hints else ""))


def _subparser(
    parser: argparse.ArgumentParser, command: str | None
) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and command in action.choices:
            return action.choices[command]
    return None


def _os_error_line(exc: OSError) -> str:
    what = exc.strerror or str(exc)
    if exc.errno == errno.ENOSPC:
        what += " (free some space and run it again)"
    name = exc.filename
    if name is None and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EIO):
        name = "standard output" if _stdout_failed() else None
    return f"{name}: {what}" if name is not None else what


def _stdout_failed() -> bool:
    try:
        sys.stdout.flush()
    except OSError:
        return True
    return False


def _drop_stdout() -> None:
    """Point stdout at /dev/null: what could not be written is dropped, so the flush at
    interpreter exit cannot fail again and print a second, unhandled error."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
