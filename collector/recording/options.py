"""`record`'s options, checked: the command line as one typed value, so the rest of the
recording never reads argparse's namespace.  Each check fails with the line the user sees."""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from collector.errors import UserError
from collector.files import check_output
from collector.inject_build import LIBRARY_NAME
from collector.recording.gpu_metrics import MAX_RATE_HZ
from collector.recording.program_profiler import ProgramProfilerPlan, program_profiler_plan
from collector.recording.windows import CapturePlan, capture_plan

# GPU activity kinds the injection library records (--kinds).
KINDS = ("kernel", "memcpy", "memset", "sync", "marker", "memory")
LAUNCH_STACK_MODES = ("auto", "inprocess", "ebpf", "off")
# CPU samplers: the in-process one (CFI + Python frames, no privilege) is the default; the eBPF
# one (root) walks frame pointers but has kernel frames.  docs/ARCHITECTURE.md has the numbers.
CPU_SAMPLERS = ("inprocess", "ebpf")
MAX_FREQ_HZ = 10_000
# Blocking calls shorter than this are not recorded (docs/ARCHITECTURE.md, "Blocked time").
DEFAULT_WAIT_THRESHOLD_US = 100
MAX_WAIT_THRESHOLD_US = 60_000_000


@dataclass(frozen=True)
class RecordOptions:
    """One recording's options, checked (but --freq: see check_freq)."""

    cmd: list[str]  # the target's command line
    output: Path
    gpu: bool
    cpu: bool
    kinds: list[str]  # GPU activity kinds, each one of KINDS
    cpu_sampler: str  # one of CPU_SAMPLERS
    freq: int  # CPU samples per second, as given
    launch_stacks: str  # as asked for (--no-stacks: off), before resolve_launch_stacks
    python_frames: bool
    kernel_stacks: bool  # in-process sampler: eBPF kernel frames where root
    kernel_from_start: bool  # the target waits for the eBPF kernel-mode sampler
    keep_streams: Path | None
    plan: CapturePlan  # the capture-window mode
    program_profiler: ProgramProfilerPlan  # the program's own CUPTI profiler, other tools
    max_bytes: int | None  # --max-size in bytes
    stop_after_s: float | None  # --duration when it stops the target (not a window's length)
    quiet: bool
    gpu_metrics_hz: float | None = None  # GPU counter reads per second; None: off
    python_names: bool = True  # the Python startup hook (collector/recording/python_names.py)
    wait_threshold_us: int = DEFAULT_WAIT_THRESHOLD_US  # 0: no blocked-time capture


def check_options(args: argparse.Namespace) -> RecordOptions:
    """The parsed options, checked in the order the user reads them."""
    cmd = list(args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
    if not cmd:
        raise UserError("no command given (put it after --)")
    target = check_target(cmd[0])
    # Before the target runs, not after: a recording must not end in an unwritable path.
    check_output(args.output, [target])
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise UserError(f"unknown --kinds: {', '.join(sorted(unknown))}")
    gpu = not args.no_gpu
    plan = capture_plan(args)
    max_bytes = None
    if args.max_size is not None:
        if not args.max_size > 0:
            raise UserError(f"--max-size {args.max_size}: give a number of megabytes > 0")
        max_bytes = round(args.max_size * 1e6)
    gpu_metrics_hz = None if args.no_gpu_metrics or not gpu else args.gpu_metrics
    if gpu_metrics_hz is not None and not 0 < gpu_metrics_hz <= MAX_RATE_HZ:
        raise UserError(f"--gpu-metrics {gpu_metrics_hz:g}: give 0 < RATE <= {MAX_RATE_HZ:g}")
    wait_threshold_us = args.wait_threshold
    if not 0 <= wait_threshold_us <= MAX_WAIT_THRESHOLD_US:
        raise UserError(
            f"--wait-threshold {wait_threshold_us}: give 0 (none) .. {MAX_WAIT_THRESHOLD_US} "
            "microseconds"
        )
    if plan.in_process and not gpu:
        raise UserError(
            f"--capture-range {plan.mode}: the GPU recording sees those calls; drop --no-gpu"
        )
    return RecordOptions(
        cmd=cmd,
        output=args.output,
        gpu=gpu,
        cpu=not args.no_cpu,
        kinds=kinds,
        cpu_sampler=args.cpu_sampler,
        freq=args.freq,
        launch_stacks="off" if args.no_stacks else args.launch_stacks,
        python_frames=not args.no_python,
        kernel_stacks=not args.no_kernel_stacks,
        kernel_from_start=args.kernel_stacks_from_start,
        keep_streams=args.keep_streams,
        plan=plan,
        program_profiler=program_profiler_plan(args, os.environ, Path(LIBRARY_NAME)),
        max_bytes=max_bytes,
        # --duration stops the target, unless it is the length of a --delay window.
        stop_after_s=None if plan.windowed else args.duration,
        quiet=args.quiet,
        gpu_metrics_hz=gpu_metrics_hz,
        python_names=not args.no_python_names,
        wait_threshold_us=wait_threshold_us,
    )


def check_target(program: str) -> str:
    """The target's executable, found as exec would find it; a UserError when there is
    none, said before any source starts (no stream directory is made for nothing)."""
    found = shutil.which(program)
    if found is not None:
        return found
    if "/" in program:
        path = Path(program)
        if not path.exists():
            raise UserError(f"cannot run {program}: no such file")
        if path.is_dir():
            raise UserError(f"cannot run {program}: it is a directory")
        raise UserError(f"cannot run {program}: not executable (chmod +x?)")
    raise UserError(f"cannot run {program}: command not found in PATH")


def check_freq(freq: int) -> int:
    """--freq for the in-process sampler (checked when that sampler is chosen, after the GPU
    library is built, so the errors come in the order they always have)."""
    if not 1 <= freq <= MAX_FREQ_HZ:
        raise UserError(f"--freq {freq}: give 1..10000 samples per second")
    return freq


def add_cpu_arguments(p: argparse.ArgumentParser) -> None:
    """record's CPU sampling flags: which sampler, its rate, kernel frames, blocked calls."""
    from collector.sources.bcc_sampler import DEFAULT_FREQ_HZ

    p.add_argument(
        "--cpu-sampler",
        choices=CPU_SAMPLERS,
        default="inprocess",
        help="inprocess (default): a sampler loaded into the target (LD_PRELOAD), native "
        "frames unwound by CFI plus Python frames, no root needed; ebpf: bcc perf-event "
        "sampler (root), frame-pointer user stacks plus kernel frames",
    )
    p.add_argument(
        "--no-kernel-stacks",
        action="store_true",
        help="in-process CPU sampler: no eBPF sampling of kernel-mode time (which, as root, puts "
        "kernel frames on top of the samples taken in system calls and faults)",
    )
    p.add_argument(
        "--kernel-stacks-from-start",
        action="store_true",
        help="in-process CPU sampler as root: start the target only once the eBPF sampler of "
        "kernel-mode time is compiled and attached (seconds), so that kernel-mode time is "
        "sampled from the target's first instruction; by default it is compiled while the "
        "target runs, and the summary says how much kernel-mode time came before it",
    )
    p.add_argument(
        "--freq", type=int, default=DEFAULT_FREQ_HZ, help="CPU samples per second of CPU time"
    )
    p.add_argument(
        "--wait-threshold",
        type=int,
        default=DEFAULT_WAIT_THRESHOLD_US,
        metavar="US",
        help="in-process CPU sampler: record each blocking call (poll, read, lock, queue and "
        "semaphore waits, sleep, waitpid...) that blocks a thread at least US microseconds, "
        f"with its stack (default {DEFAULT_WAIT_THRESHOLD_US}; 0: none)",
    )
