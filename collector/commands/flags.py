"""The flags that several subcommands take, each defined once here (tests/test_command_flags.py
fails on a flag name that two add_argument calls define).

Where a flag means something a little different per command (what `--span` covers, what
`-o` writes), the command passes its own help; the name, type, metavar and choices are
fixed here.  Choices that a reader module owns are imported where the flag is added, so
that a command that does not add the flag does not load that module (`record --help`
loads no reader: tests/test_command_imports.py)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

FORMATS = ("table", "csv", "json")


def add_output_flag(
    p: argparse.ArgumentParser, help: str, *, required: bool = False, default: Path | None = None
) -> None:
    """-o/--output: the file the command writes."""
    p.add_argument("-o", "--output", type=Path, required=required, default=default, help=help)


def add_quiet_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")


def add_format_flag(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--format", choices=FORMATS, default="table", help=help)


def add_window_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--window",
        type=int,
        metavar="N",
        help="only capture window N of each process (1 = the first; a trace recorded with "
        "--capture-range ... --capture-range-end repeat holds several): its API calls, CPU "
        "samples and the GPU ops launched inside it",
    )


def add_span_flag(p: argparse.ArgumentParser, help: str) -> None:
    """--span: the time a command looks at (steps, active, all), default steps."""
    # The light module of the two that name the spans (exporters/report/scope.py loads
    # the analysis); tests/test_command_flags.py checks that they agree.
    from exporters.report.ui_opening import SPANS

    p.add_argument("--span", choices=SPANS, default="steps", help=help)


def add_steps_flag(p: argparse.ArgumentParser, help: str) -> None:
    """--steps: the step slices by name or GLOB (None: the analysis finds them)."""
    p.add_argument("--steps", metavar="NAME", default=None, help=help)


def add_stack_flags(p: argparse.ArgumentParser) -> None:
    """--mode and --unit: which stacks `folded` and `flamegraph` fold, and their weight."""
    from exporters.analysis.idle_stacks import MODES
    from exporters.folded.folded import UNITS

    p.add_argument("--mode", choices=MODES, default="merge", help="default: merge")
    p.add_argument(
        "--unit",
        choices=UNITS,
        default="ns",
        help="weight unit (default: ns; 'samples' for CPU samples without a recorded frequency)",
    )


def add_frame_flags(p: argparse.ArgumentParser) -> None:
    """How frames read, the same in `folded`, `flamegraph` and `report`."""
    p.add_argument(
        "--full-names",
        action="store_true",
        help="C++ frames with their parameter lists and template arguments (default: "
        "at::native::copy_impl; the trace always keeps the full signatures)",
    )
    p.add_argument(
        "--all-frames",
        action="store_true",
        help="every frame, the interpreter's too (default: CPython's own frames between two "
        "Python frames are hidden, as py-spy --native shows stacks; native frames under the "
        "innermost Python frame show, but report's top functions count CPython's own among "
        "them as that Python function's self time; the trace keeps every frame)",
    )


def add_trace_processor_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace-processor",
        metavar="PATH",
        help="use this native trace_processor_shell (or set XPU_PERF_TRACE_PROCESSOR); "
        "default: the embedded engine",
    )


def add_cache_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="load the trace and run every query again instead of answering from the "
        "results and the engine snapshot kept from an earlier look "
        "(~/.cache/xpu-perf/results and engine; or set XPU_PERF_NO_CACHE=1)",
    )


def apply_cache_flag(args: argparse.Namespace) -> None:
    """--no-cache, for this process and the batch's workers (they inherit the variable)."""
    from exporters.perfetto.engine import cache_settings

    if args.no_cache:
        os.environ[cache_settings.ENV_DISABLE] = "1"
    cache_settings.check()  # a bad XPU_PERF_*CACHE* value: one line before any work
