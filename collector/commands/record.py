"""`xpu-perf record`: run a command under the profiler and write one Perfetto trace.

`main` is the story of one recording: check the options, choose the sources (the GPU's CUPTI
injection, a CPU sampler, eBPF launch probes), start them and run the target, stop them when
it ends, write every source's events into the trace, print the summary.  The details are in
collector/recording/ (docs/ARCHITECTURE.md lists its modules).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import threading
from pathlib import Path

from collector.commands.flags import add_output_flag, add_quiet_flag
from collector.errors import UserError
from collector.recording.disk_space import StreamsDisk
from collector.recording.gpu_metrics import add_gpu_metrics_arguments
from collector.recording.kept_streams import Manifest, StreamsDir, usable_cpus
from collector.recording.options import (
    KINDS,
    LAUNCH_STACK_MODES,
    add_cpu_arguments,
    check_options,
)
from collector.recording.program_profiler import add_argument as add_program_profiler
from collector.recording.python_names import add_arguments as add_python_arguments
from collector.recording.selection import select_sources
from collector.recording.size_limit import SizeLimit
from collector.recording.summary import say, toggle_hint
from collector.recording.target import Interrupt, run_target
from collector.recording.windows import CAPTURE_RANGE_HELP, TreeWindows

FINISH = "collector.recording.finish"
DEFAULT_OUTPUT = Path("xpu-perf.perfetto-trace")


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "record",
        help="run a command and record GPU activity, CUDA API calls and launch stacks",
        description="Run CMD under xpu-perf and write a Perfetto trace. GPU recording (CUPTI "
        "injection) needs no root; the target's exit code is passed through.",
    )
    add_output_flag(
        p, "the trace to write (default: xpu-perf.perfetto-trace)", default=DEFAULT_OUTPUT
    )
    p.add_argument("--no-cpu", action="store_true", help="no CPU sampling (GPU recording only)")
    p.add_argument("--no-gpu", action="store_true", help="no GPU recording (CPU sampling only)")
    add_gpu_metrics_arguments(p)
    add_cpu_arguments(p)
    p.add_argument(
        "--duration",
        type=float,
        help="stop recording (and the target) after S seconds; with --delay: the capture "
        "window's length (the target keeps running)",
    )
    p.add_argument(
        "--max-size",
        type=float,
        metavar="MB",
        help="stop recording (and the target, as --duration does) once the recorded data "
        "reaches MB megabytes (10^6 bytes); the metadata and summary say when",
    )
    p.add_argument(
        "--delay",
        type=float,
        metavar="S",
        help="open the capture window S seconds after the target starts (until --duration "
        "ends it, else until exit); nothing (GPU activity, API calls, CPU samples) is recorded "
        "outside it",
    )
    p.add_argument(
        "--capture-range",
        metavar=CAPTURE_RANGE_HELP.replace(" ", ""),
        help="capture only inside windows: cudaProfilerApi = between cudaProfilerStart and "
        "cudaProfilerStop (torch.cuda.profiler.start/stop; cuProfilerStart/Stop too); "
        "nvtx:NAME = inside NVTX ranges named NAME (push/pop, start/end; any domain, or only "
        "DOMAIN with NAME@DOMAIN); signal = from one --toggle-signal sent to xpu-perf to the "
        "next (for runs nobody instrumented); torch-profiler = the active steps of the "
        "program's own torch.profiler schedule",
    )
    p.add_argument(
        "--capture-range-end",
        metavar="stop|repeat|repeat:N",
        help="with --capture-range: record the first window (stop; the default but for "
        "signal and torch-profiler), every window (repeat; their default) or the first N "
        "(repeat:N), per process",
    )
    p.add_argument(
        "--toggle-signal",
        metavar="SIG",
        help="with --capture-range signal: the signal to send to xpu-perf to open and close a "
        "window (default SIGUSR2; e.g. kill -USR2 PID, the PID record prints)",
    )
    add_program_profiler(p)
    p.add_argument(
        "--launch-stacks",
        choices=LAUNCH_STACK_MODES,
        default="auto",
        help="where launch-site call stacks come from: the injection library's in-process "
        "unwinder, eBPF uprobes (root), or none; auto = inprocess when recording the GPU, "
        "else ebpf uprobes on cudaLaunchKernel/cuLaunchKernel when eBPF is available",
    )
    p.add_argument("--no-stacks", action="store_true", help="same as --launch-stacks off")
    add_python_arguments(p)
    p.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"GPU activity kinds, comma separated (default {','.join(KINDS)})",
    )
    p.add_argument(
        "--keep-streams", type=Path, metavar="DIR", help="copy the raw CUPTI streams here"
    )
    p.add_argument(
        "--from-streams",
        type=Path,
        metavar="DIR",
        help="run nothing: write the trace (-o) from the streams a recording kept in DIR "
        "because its trace could not be written (record says where)",
    )
    add_quiet_flag(p)
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    """One recording; returns the target's exit status."""
    if args.from_streams is not None:
        from collector.recording.keep import write_kept

        return write_kept(args)
    options = check_options(args)
    size_limit = SizeLimit(options.max_bytes) if options.max_bytes is not None else None
    command_line = ["xpu-perf", "record", "--", *options.cmd]
    # The streams go to one directory, kept if the trace cannot be written.
    streams = StreamsDir.create()
    try:
        selection = select_sources(options, streams)
        # The streams' file system watched: a full one cuts streams short without a word.
        selection.sources.append(StreamsDisk(streams.path))
        plan = options.plan
        streams.write_manifest(
            Manifest(command_line, selection.freq, plan.mode, cpu_count=usable_cpus())
        )
    except BaseException:
        streams.remove()
        raise
    # The windows record opens itself, for the whole tree (--delay, the toggle signal).
    tree = TreeWindows(plan) if plan.windowed else None
    hint = toggle_hint(plan, os.getpid())
    if hint and not options.quiet:
        say(hint)
    # From here to the end a signal never leaves the recording half done: a complete trace
    # or kept streams, a non-zero exit, and one line saying how to finish.
    interrupt = Interrupt().install()
    # What writes the trace (the stream decoders, numpy, the writer) loads while the
    # target runs, not before it starts nor after it ends.
    threading.Thread(target=importlib.import_module, args=(FINISH,), daemon=True).start()
    try:
        try:
            # Start the sources, run the target until it ends (or is stopped), stop them.
            code = run_target(
                options.cmd, selection.sources, options.stop_after_s, size_limit, tree, interrupt
            )
        except BaseException:
            streams.remove()  # the target did not run, or record was stopped: nothing kept
            raise
        # The trace, or the streams kept; the summary.
        from collector.recording.finish import finish

        return finish(options, selection, streams, code, interrupt, size_limit, tree)
    finally:
        interrupt.restore()
        if tree is not None:
            tree.close()


if __name__ == "__main__":
    # `python -m collector.commands.record ...`: the same command without the other
    # subcommands' imports (useful where only the recording dependencies are installed).
    _parser = argparse.ArgumentParser(prog="xpu-perf")
    add_parser(_parser.add_subparsers(dest="command"))
    _args = _parser.parse_args(["record", *sys.argv[1:]])
    try:
        sys.exit(main(_args))
    except UserError as _exc:
        print(f"xpu-perf record: error: {_exc}", file=sys.stderr)
        sys.exit(2)
