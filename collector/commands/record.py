"""`xpu-perf record`: run a command under the profiler and write one Perfetto trace.

GPU side (this module): the CUPTI injection library is built on demand, loaded into the target
(and its children) through CUDA_INJECTION64_PATH, and writes one stream per process into a
private directory; after the target exits the streams become GPU ops, CUDA API slices, flows
and launch stacks.  Needs no root.

CPU sources (the eBPF sampler) plug in as further `RecordSource`s: every source is started
before the target and stopped after it, then each writes its events through its own producer.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from collector.errors import UserError
from collector.inject_build import BuildError, build, build_sampler
from collector.launch_join import EbpfLaunchStacks
from collector.recording.windows import (
    CAPTURE_RANGE_HELP,
    NVTX_PREFIX,
    CapturePlan,
    TreeWindows,
    capture_plan,
    window_summary,
)
from collector.setup_check import Problem, check_ebpf
from collector.sources.bcc_sampler import DEFAULT_FREQ_HZ, BccCpuSampler, BccKernelModeSampler
from collector.sources.bcc_uprobes import CUDA_LAUNCH_PROBES, BccLaunchUprobes, marker_probe
from collector.sources.cpu_stream import UNWIND_ENDS, InprocessCpuSource
from collector.sources.cupti import CuptiSource
from exporters.perfetto.writer import TraceWriter

# After Ctrl-C the target gets SIGINT, then SIGTERM, then SIGKILL, this far apart.
_STOP_GRACE_S = 2.0
KINDS = ("kernel", "memcpy", "memset", "sync", "marker")
LAUNCH_STACK_MODES = ("auto", "inprocess", "ebpf", "off")
# CPU samplers: the in-process one (CFI + Python frames, no privilege) is the default; the eBPF
# one (root) walks frame pointers but has kernel frames.  docs/ARCHITECTURE.md has the numbers.
CPU_SAMPLERS = ("inprocess", "ebpf")
# What `--launch-stacks auto` picks when the GPU is recorded: the in-process unwinder, from the
# H100 comparison in docs/benchmarks.md (eBPF's frame-pointer walk stops in libraries built
# without frame pointers, such as libcupti and libtorch_cuda).
AUTO_WITH_GPU = "inprocess"


class RecordSource(Protocol):
    """What `record` needs from a source: environment for the target, a start before it, a
    stop after it, then its events and counters (written as metadata `<name>_<counter>`)."""

    name: str

    def target_env(self) -> Mapping[str, str]: ...
    def start(self) -> None: ...
    def target_started(self, pid: int) -> None: ...
    def stop(self) -> None: ...
    def events(self) -> Iterable[model.Event]: ...
    def stats(self) -> Mapping[str, int]: ...


@runtime_checkable
class WindowedSource(Protocol):
    """A source that recorded capture windows (the GPU source under --capture-range/--delay)."""

    def windows(self) -> Sequence[model.CaptureWindow]: ...


# How often `record` measures what the target has recorded so far (--max-size).
_SIZE_POLL_S = 0.2


@runtime_checkable
class SizedSource(Protocol):
    """A source whose target writes files while it runs (--max-size measures them)."""

    def recorded_bytes(self) -> int: ...


def directory_bytes(directory: Path) -> int:
    """Bytes of the files in `directory` (the target's processes write them as it runs)."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            with contextlib.suppress(OSError):  # a file may go between listing and stat
                total += entry.stat(follow_symlinks=False).st_size
    return total


@dataclass
class SizeLimit:
    """--max-size: the recorded data's limit, and when the run reached it."""

    max_bytes: int
    started_ns: int = 0  # CLOCK_MONOTONIC when the target was started
    cut_at_ns: int | None = None  # CLOCK_MONOTONIC when the recorded data reached max_bytes
    bytes_at_cut: int = 0

    def metadata(self) -> dict[str, int]:
        cut = self.cut_at_ns is not None
        return {
            "max_size_bytes": self.max_bytes,
            "cut_by_max_size": int(cut),
            "cut_at_ns": self.cut_at_ns or 0,  # trace clock (CLOCK_MONOTONIC); 0: not cut
            "cut_recorded_bytes": self.bytes_at_cut,
        }

    def summary(self) -> str | None:
        if self.cut_at_ns is None:
            return None
        after = (self.cut_at_ns - self.started_ns) / 1e9
        return (
            f"recording cut by --max-size {self.max_bytes / 1e6:g} MB {after:.1f} s after the "
            f"target started (recorded data {self.bytes_at_cut / 1e6:.1f} MB): the target was "
            "stopped there, as by --duration"
        )


class CuptiRecording:
    """The GPU source: CUPTI injection into the target, streams read after it exits."""

    name = "cupti"

    def __init__(
        self,
        library: Path,
        *,
        stacks: bool = True,
        python_frames: bool = True,
        kinds: Sequence[str] = KINDS,
        keep_streams: Path | None = None,
        capture: CapturePlan | None = None,
    ) -> None:
        self.library = library
        self.capture = capture or CapturePlan()
        self.stacks = stacks
        self.python_frames = python_frames
        self.kinds = kinds
        self.keep_streams = keep_streams
        self.directory = Path(tempfile.mkdtemp(prefix="xpu-perf-cupti-"))
        share_with_target(self.directory)
        self._source: CuptiSource | None = None

    def target_env(self) -> Mapping[str, str]:
        env = {
            "CUDA_INJECTION64_PATH": str(self.library),
            "XPU_PERF_OUT_DIR": str(self.directory),
            "XPU_PERF_STACKS": "1" if self.stacks else "0",
            "XPU_PERF_PYTHON": "1" if self.python_frames else "0",
            "XPU_PERF_KINDS": ",".join(self.kinds),
            **self.capture.library_env,
        }
        if "XPU_PERF_WINDOW_DELAY_MS" in env:
            # --delay counts from the target's start: asked for just before it is started,
            # on the CLOCK_MONOTONIC the library compares it with (the same in every process
            # of the tree, so a child started later shares the window).
            env["XPU_PERF_WINDOW_T0_NS"] = str(time.monotonic_ns())
        if "marker" in self.kinds or self.capture.mode.startswith(NVTX_PREFIX):
            # NVTX hands its callbacks to this library, which passes them to the process's own
            # libcupti (pointing NVTX at a libcupti path could load a second copy).
            env["NVTX_INJECTION64_PATH"] = str(self.library)
        return env

    def start(self) -> None:
        pass

    def target_started(self, pid: int) -> None:
        pass

    def stop(self) -> None:
        if self.keep_streams is not None:
            self.keep_streams.mkdir(parents=True, exist_ok=True)
            for p in self.directory.iterdir():
                shutil.copy2(p, self.keep_streams / p.name)

    def events(self) -> Iterable[model.Event]:
        self._source = CuptiSource(self.directory)
        yield from self._source.events()
        shutil.rmtree(self.directory, ignore_errors=True)

    def stats(self) -> Mapping[str, int]:
        return dict(self._source.counts) if self._source else {}

    def windows(self) -> Sequence[model.CaptureWindow]:
        return list(self._source.windows) if self._source else []

    def recorded_bytes(self) -> int:
        return directory_bytes(self.directory)


class InprocessCpuRecording:
    """The CPU source: the sampler library LD_PRELOAD'ed into every process of the target's
    tree (children inherit the environment), streams read after the target exits."""

    name = "cpu"

    def __init__(
        self,
        library: Path,
        freq: int,
        python_frames: bool = True,
        kernel: BccKernelModeSampler | None = None,
    ) -> None:
        """kernel: as root, the eBPF sampler of kernel-mode time whose stacks go on top."""
        self.library = library
        self.freq = freq
        self.python_frames = python_frames
        self.kernel = kernel
        self.directory = Path(tempfile.mkdtemp(prefix="xpu-perf-cpu-"))
        share_with_target(self.directory)
        self._source: InprocessCpuSource | None = None

    def target_env(self) -> Mapping[str, str]:
        library = self.library
        if target_credentials():
            # Under sudo the target runs as the user, who may not reach root's cache.
            library = self.directory / self.library.name
            shutil.copy2(self.library, library)
            library.chmod(0o755)
        preload = " ".join(p for p in (str(library), os.environ.get("LD_PRELOAD", "")) if p)
        return {
            "LD_PRELOAD": preload,
            "XPU_PERF_CPU_KERNEL": "1" if self.kernel else "0",
            "XPU_PERF_CPU_HZ": str(self.freq),
            "XPU_PERF_CPU_OUT_DIR": str(self.directory),
            "XPU_PERF_PYTHON": "1" if self.python_frames else "0",
        }

    def start(self) -> None:
        if self.kernel:
            self.kernel.start()

    def target_started(self, pid: int) -> None:
        if self.kernel:
            self.kernel.target_started(pid)

    def stop(self) -> None:
        if self.kernel:
            self.kernel.stop()

    def recorded_bytes(self) -> int:
        return directory_bytes(self.directory)

    def events(self) -> Iterable[model.Event]:
        kernel = self.kernel.kernel_samples() if self.kernel else None
        self._source = InprocessCpuSource(self.directory, kernel_stacks=kernel)
        yield from self._source.events()
        shutil.rmtree(self.directory, ignore_errors=True)

    def stats(self) -> Mapping[str, int]:
        counts = dict(self._source.counts) if self._source else {}
        if self.kernel:
            kernel = self.kernel.stats()
            counts["kernel_samples"] = kernel.get("cpu_samples", 0)
            counts["kernel_lost_ringbuf_full"] = kernel.get("lost_ringbuf_full", 0)
        return counts


def share_with_target(directory: Path) -> None:
    """A stream directory the target can write to: under sudo the target is the user."""
    creds = target_credentials()
    if creds:
        os.chown(directory, int(creds["user"]), int(creds["group"]))  # type: ignore[call-overload]


def cpu_summary_lines(cpu: Mapping[str, int], freq: int) -> list[str]:
    """The in-process CPU sampler's part of the end-of-record summary."""
    samples = cpu.get("samples", 0)
    stopped = {r: cpu.get(f"unwind_{r}", 0) for r in UNWIND_ENDS[1:] if cpu.get(f"unwind_{r}", 0)}
    pct = (lambda n: f"{100.0 * n / samples:.1f}%") if samples else (lambda n: "-")
    lines = [
        f"cpu samples: {samples} at {freq} Hz from {cpu.get('streams', 0)} processes, "
        f"unwound to the root: {pct(cpu.get('unwind_complete', 0))}, "
        f"with Python frames: {pct(cpu.get('samples_with_python', 0))}",
        (
            f"cpu samples in the kernel: {cpu.get('kernel_joined', 0)} with kernel frames"
            f" (of {cpu['kernel_samples']} eBPF kernel samples)"
            if "kernel_samples" in cpu
            else "cpu samples in the kernel: not sampled (not root, or no bcc)"
        ),
        f"cpu samples stopped early: {stopped or 'none'}; lost: "
        f"ring_full={cpu.get('samples_ring_full', 0)} "
        f"transport={cpu.get('transport_dropped_rows', 0)} "
        f"timers_failed={cpu.get('timers_failed', 0)}",
    ]
    if cpu.get("process_ns", 0):
        own = cpu.get("handler_ns", 0) + cpu.get("scanner_ns", 0)
        lines.append(
            f"sampler's own CPU time: {own / 1e6:.1f} ms = {100 * own / cpu['process_ns']:.2f}% "
            f"of the sampled processes' {cpu['process_ns'] / 1e9:.1f} s"
        )
    if cpu.get("timer_overruns", 0):
        lines.append(
            f"{cpu['timer_overruns']} sampling periods were merged by the kernel (CPU-time "
            f"timers fire on scheduler ticks): {freq} Hz is above this kernel's tick rate"
        )
    if cpu.get("streams_python_unsupported", 0):
        lines.append(
            f"cpu samples of {cpu['streams_python_unsupported']} processes have no Python "
            f"frames: CPython 3.{cpu.get('python_unsupported_minor', 0)}'s layout was not "
            "recognised (3.11-3.14 are read); their native frames are there"
        )
    if cpu.get("streams_without_counters", 0):
        lines.append(
            f"{cpu['streams_without_counters']} of {cpu.get('streams', 0)} sampled processes "
            "ended without their final flush (killed): their last samples are missing"
        )
    return lines


class _Interrupt:
    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum: int, _frame: object) -> None:
        self.signal = signum


def target_credentials() -> dict[str, object]:
    """Under sudo, the target runs as the invoking user (SUDO_UID/SUDO_GID), not as root."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid:
        return {}
    import pwd

    try:
        groups = os.getgrouplist(pwd.getpwuid(int(uid)).pw_name, int(gid))
    except KeyError:
        groups = [int(gid)]
    return {"user": int(uid), "group": int(gid), "extra_groups": groups}


def run_target(
    cmd: Sequence[str],
    sources: Sequence[RecordSource],
    duration: float | None = None,
    size_limit: SizeLimit | None = None,
    tree: TreeWindows | None = None,
) -> int:
    """Start the sources, run `cmd` with their environment, stop them; returns the target's
    exit status (128+N when killed by signal N).  Ctrl-C (or the end of `duration`, or the
    recorded data reaching `size_limit`, which notes when) is passed on to the target as
    SIGINT, then SIGTERM, then SIGKILL.  `tree`: the windows record opens for the whole tree
    (--delay on record's clock; the toggle signal of --capture-range signal)."""
    env = dict(os.environ)
    for source in sources:
        env.update(source.target_env())
    if tree is not None:
        env.update(tree.env())
    for source in sources:
        source.start()
    interrupt = _Interrupt()
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    toggle = tree.plan.toggle_signal if tree is not None else None
    if tree is not None and toggle is not None:
        # Python runs the handler in this thread between bytecodes: no race with poll().
        previous[toggle] = signal.signal(toggle, lambda _s, _f: tree.toggle())
    try:
        try:
            creds = target_credentials()
            proc = subprocess.Popen(list(cmd), env=env, **creds)  # type: ignore[call-overload]
        except OSError as exc:
            raise UserError(f"cannot run {cmd[0]}: {exc.strerror}") from None
        started_ns = time.monotonic_ns()
        if size_limit is not None:
            size_limit.started_ns = started_ns
        if tree is not None:
            tree.target_started(proc.pid, started_ns)
        for source in sources:
            source.target_started(proc.pid)
        escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
        last_sent: float | None = None
        deadline = time.monotonic() + duration if duration else None
        sized = [s for s in sources if isinstance(s, SizedSource)]
        next_measure = time.monotonic()
        while proc.poll() is None:
            measure = size_limit is not None and size_limit.cut_at_ns is None
            if size_limit is not None and measure and time.monotonic() >= next_measure:
                next_measure = time.monotonic() + _SIZE_POLL_S
                recorded = sum(s.recorded_bytes() for s in sized)
                if recorded >= size_limit.max_bytes:
                    size_limit.cut_at_ns = time.monotonic_ns()
                    size_limit.bytes_at_cut = recorded
            due = last_sent is None or time.monotonic() - last_sent >= _STOP_GRACE_S
            stopping = (
                interrupt.signal is not None
                or (deadline is not None and time.monotonic() >= deadline)
                or (size_limit is not None and size_limit.cut_at_ns is not None)
            )
            if stopping and escalation and due:
                proc.send_signal(escalation.pop(0))
                last_sent = time.monotonic()
            wait_s = 0.05
            if tree is not None:
                tree.poll(time.monotonic_ns())
                # The timed window opens and closes on time, not at the next 50 ms poll.
                due_s = tree.next_change_s(time.monotonic_ns())
                wait_s = min(wait_s, due_s) if due_s is not None else wait_s
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=wait_s)
        if tree is not None:
            tree.finish()
        code = proc.returncode
        return 128 - code if code < 0 else code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for source in sources:
            source.stop()


def write_trace(
    out: Path,
    sources: Sequence[RecordSource],
    command_line: Sequence[str],
    freq: int = 0,
    capture: CapturePlan | None = None,
    size_limit: SizeLimit | None = None,
    tree: TreeWindows | None = None,
) -> dict[str, dict[str, int]]:
    """Every source through its own producer; counters as metadata `<source>_<counter>`
    (SQL: args key `debug.<source>_<counter>` of the `xpu_perf_metadata` slice).  `capture`:
    the window mode, written with the window count as metadata `capture_range` and
    `windows`; the windows of the injection library, else (no GPU recording, or no process
    used CUDA) those `tree` opened, as slices."""
    stats: dict[str, dict[str, int]] = {}
    with TraceWriter(
        out,
        command_line=command_line,
        clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
        sample_frequency_hz=freq,  # also written as metadata, read by `folded`
    ) as writer:
        written = 0  # window slices
        # Which machine: a multi-node job is one record per node, queried together later.
        writer.set_metadata("host", socket.gethostname())
        for source in sources:
            producer = writer.producer(source.name)
            producer.write_all(source.events())
            stats[source.name] = dict(source.stats())
            for key, value in stats[source.name].items():
                prefixed = key if key.startswith(f"{source.name}_") else f"{source.name}_{key}"
                writer.set_metadata(prefixed, value)
            if isinstance(source, WindowedSource):
                written += write_windows(writer, source.windows())
        if tree is not None and not written:
            written = write_windows(writer, tree.windows)
            stats["record"] = {"windows": written, "toggles": tree.toggles}
        if size_limit is not None:
            for key, value in size_limit.metadata().items():
                writer.set_metadata(key, value)
        if capture is not None and capture.windowed:
            writer.set_metadata("capture_range", capture.label)
            writer.set_metadata("windows", written)
            if tree is not None and capture.toggle_signal is not None:
                writer.set_metadata("toggles", tree.toggles)
    return stats


WINDOW_CATEGORY = "xpu_perf_window"


def write_windows(writer: TraceWriter, windows: Sequence[model.CaptureWindow]) -> int:
    """Each capture window as a slice named by what opened it, on the `xpu-perf` track's
    lane of its process (SQL: category `xpu_perf_window`, args `debug.reason`,
    `debug.end_reason`, `debug.pid`)."""
    for w in windows:
        writer.add_tool_slice(
            f"capture windows (pid {w.pid})",
            w.start,
            w.end - w.start,
            f"capture window ({w.reason})",
            WINDOW_CATEGORY,
            {"reason": w.reason, "end_reason": w.end_reason, "pid": w.pid},
        )
    return len(windows)


def resolve_launch_stacks(
    requested: str, gpu: bool, ebpf_problems: Sequence[Problem]
) -> tuple[str, str | None]:
    """The launch-stack mode to use, and a line for the user when it is not the one asked for.

    inprocess needs the GPU recording (its unwinder runs in the injection library); ebpf needs
    root and bcc, and without the GPU recording probes cudaLaunchKernel/cuLaunchKernel (stacks
    without correlation ids) instead of the library's marker.
    """
    if requested == "off":
        return "off", None
    if requested == "inprocess" and not gpu:
        raise UserError("--launch-stacks inprocess needs GPU recording (drop --no-gpu)")
    if requested == "auto":
        if gpu:
            return AUTO_WITH_GPU, None
        return ("off", None) if ebpf_problems else ("ebpf", None)
    if requested == "ebpf" and ebpf_problems:
        fallback = "inprocess" if gpu else "off"
        why = "; ".join(map(str, ebpf_problems))
        return fallback, f"eBPF launch stacks skipped, using {fallback}: {why}"
    return requested, None


def summary_lines(cupti: Mapping[str, int]) -> list[str]:
    """The GPU part of the end-of-record summary."""
    ops = cupti.get("gpu_ops", 0)
    launches = cupti.get("launches", 0)
    lines = [
        f"records: kernel={cupti.get('records_kernel', 0)} memcpy={cupti.get('records_memcpy', 0)} "
        f"memset={cupti.get('records_memset', 0)} sync={cupti.get('records_sync', 0)} "
        f"api={cupti.get('records_api', 0)} nvtx={cupti.get('records_marker', 0)} "
        f"(processes={cupti.get('streams', 0)})",
        f"dropped: cupti={cupti.get('cupti_dropped_records', 0)} "
        f"transport={cupti.get('transport_dropped_rows', 0)}",
        f"gpu ops without api call: {cupti.get('gpu_ops_without_api', 0)} of {ops}",
        f"launches without stack: {cupti.get('launches_without_stack', 0)} of {launches}",
    ]
    no_python = cupti.get("streams_python_unsupported", 0)
    if no_python:
        lines.append(
            f"launch stacks of {no_python} processes have no Python frames: CPython "
            f"3.{cupti.get('python_unsupported_minor', 0)}'s frame layout was not recognised "
            "(this build reads 3.11-3.14); their native frames are there"
        )
    # A stream cut inside a chunk also lacks its final counters: counted once, here.
    unflushed = cupti.get("streams_without_counters", 0)
    if unflushed:
        # Killed (SIGKILL, a crash): the library's periodic flush runs every second, so what
        # the process did in its last second before it died is not in the trace.
        lines.append(
            f"{unflushed} of {cupti.get('streams', 0)} processes ended without their final "
            "flush (killed or crashed): up to their last second of GPU activity and API calls "
            "is missing"
        )
    if "ebpf_launch_stacks" in cupti:
        lost = {
            k.removeprefix("ebpf_launch_"): v
            for k, v in cupti.items()
            if k.startswith("ebpf_launch_") and v and k != "ebpf_launch_stacks"
        }
        lines.append(
            f"eBPF launch stacks: {cupti['ebpf_launch_stacks']}, "
            f"unmatched: {cupti.get('launch_stacks_unmatched', 0)}, lost/errors: {lost or 'none'}"
        )
    return lines


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "record",
        help="run a command and record GPU activity, CUDA API calls and launch stacks",
        description="Run CMD under xpu-perf and write a Perfetto trace. GPU recording (CUPTI "
        "injection) needs no root; the target's exit code is passed through.",
    )
    p.add_argument("-o", "--output", type=Path, default=Path("xpu-perf.perfetto-trace"))
    p.add_argument("--no-cpu", action="store_true", help="no CPU sampling (GPU recording only)")
    p.add_argument("--no-gpu", action="store_true", help="no GPU recording (CPU sampling only)")
    p.add_argument(
        "--no-kernel-stacks",
        action="store_true",
        help="in-process CPU sampler: no eBPF sampling of kernel-mode time (which, as root, puts "
        "kernel frames on top of the samples taken in system calls and faults)",
    )
    p.add_argument(
        "--freq", type=int, default=DEFAULT_FREQ_HZ, help="CPU samples per second of CPU time"
    )
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
        "next (for runs nobody instrumented)",
    )
    p.add_argument(
        "--capture-range-end",
        metavar="stop|repeat|repeat:N",
        help="with --capture-range: record the first window (stop; the default but for "
        "signal), every window (repeat; signal's default) or the first N (repeat:N), per "
        "process",
    )
    p.add_argument(
        "--toggle-signal",
        metavar="SIG",
        help="with --capture-range signal: the signal to send to xpu-perf to open and close a "
        "window (default SIGUSR2; e.g. kill -USR2 PID, the PID record prints)",
    )
    p.add_argument(
        "--cpu-sampler",
        choices=CPU_SAMPLERS,
        default="inprocess",
        help="inprocess (default): a sampler loaded into the target (LD_PRELOAD), native "
        "frames unwound by CFI plus Python frames, no root needed; ebpf: bcc perf-event "
        "sampler (root), frame-pointer user stacks plus kernel frames",
    )
    p.add_argument(
        "--launch-stacks",
        choices=LAUNCH_STACK_MODES,
        default="auto",
        help="where launch-site call stacks come from: the injection library's in-process "
        "unwinder, eBPF uprobes (root), or none; auto = inprocess when recording the GPU, "
        "else ebpf uprobes on cudaLaunchKernel/cuLaunchKernel when eBPF is available",
    )
    p.add_argument("--no-stacks", action="store_true", help="same as --launch-stacks off")
    p.add_argument(
        "--no-python", action="store_true", help="stacks (launch and CPU) without Python frames"
    )
    p.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help=f"GPU activity kinds, comma separated (default {','.join(KINDS)})",
    )
    p.add_argument(
        "--keep-streams", type=Path, metavar="DIR", help="copy the raw CUPTI streams here"
    )
    p.add_argument("-q", "--quiet", action="store_true", help="print only errors")
    p.add_argument("cmd", nargs=argparse.REMAINDER, help="-- CMD [ARGS...]")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    cmd = list(args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd)
    if not cmd:
        raise UserError("no command given (put it after --)")
    if not args.output.parent.resolve().is_dir():
        raise UserError(f"output directory does not exist: {args.output.parent}")
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        raise UserError(f"unknown --kinds: {', '.join(sorted(unknown))}")
    cpu = not args.no_cpu
    gpu = not args.no_gpu
    plan = capture_plan(args)
    size_limit = None
    if args.max_size is not None:
        if not args.max_size > 0:
            raise UserError(f"--max-size {args.max_size}: give a number of megabytes > 0")
        size_limit = SizeLimit(round(args.max_size * 1e6))
    if plan.in_process and not gpu:
        raise UserError(
            f"--capture-range {plan.mode}: the GPU recording sees those calls; drop --no-gpu"
        )
    requested = "off" if args.no_stacks else args.launch_stacks
    cpu_ebpf = cpu and args.cpu_sampler == "ebpf"
    needs_ebpf = cpu or requested in ("ebpf", "auto")
    ebpf_problems = check_ebpf() if needs_ebpf else []
    stacks, note = resolve_launch_stacks(requested, gpu, ebpf_problems)
    if note:
        print(f"xpu-perf record: {note}", file=sys.stderr)
    sources: list[RecordSource] = []
    if gpu:
        try:
            library = build()
        except BuildError as exc:
            raise UserError(str(exc)) from None
        cupti = CuptiRecording(
            library,
            stacks=stacks == "inprocess",
            python_frames=not args.no_python,
            kinds=kinds,
            keep_streams=args.keep_streams,
            capture=plan,
        )
        if stacks == "ebpf":
            uprobes = BccLaunchUprobes([marker_probe(str(library))])
            sources.append(EbpfLaunchStacks(cupti, uprobes))
        else:
            sources.append(cupti)
    elif stacks == "ebpf":
        sources.append(BccLaunchUprobes(CUDA_LAUNCH_PROBES))
    freq = 0
    if cpu and not cpu_ebpf:
        if not 1 <= args.freq <= 10_000:
            raise UserError(f"--freq {args.freq}: give 1..10000 samples per second")
        try:
            sampler = build_sampler()
        except BuildError as exc:
            raise UserError(str(exc)) from None
        freq = args.freq
        # As root with eBPF: kernel frames on top of the samples taken in the kernel.
        kernel = None if ebpf_problems or args.no_kernel_stacks else BccKernelModeSampler(freq)
        sources.append(
            InprocessCpuRecording(sampler, freq, python_frames=not args.no_python, kernel=kernel)
        )
    elif cpu:
        if ebpf_problems:
            print(
                "xpu-perf record: CPU sampling skipped: " + "; ".join(map(str, ebpf_problems)),
                file=sys.stderr,
            )
        else:
            freq = args.freq
            sources.append(BccCpuSampler(freq))  # started before the target, like every source
    if not sources:
        raise UserError("nothing to record (--no-gpu, and CPU sampling is unavailable)")
    tree = TreeWindows(plan) if plan.windowed else None
    if tree is not None and plan.toggle_signal is not None and not args.quiet:
        print(
            f"xpu-perf record: window closed; send {plan.toggle_signal.name} to {os.getpid()} "
            f"to open it and again to close it (kill -{plan.toggle_signal.name[3:]} "
            f"{os.getpid()})",
            file=sys.stderr,
        )
    try:
        # --duration stops the target, unless it is the length of a --delay window.
        duration = None if plan.windowed else args.duration
        code = run_target(cmd, sources, duration, size_limit, tree)
        stats = write_trace(
            args.output,
            sources,
            ["xpu-perf", "record", "--", *cmd],
            freq,
            capture=plan,
            size_limit=size_limit,
            tree=tree,
        )
    finally:
        if tree is not None:
            tree.close()
    if not args.quiet:
        if "cupti" in stats:
            for line in summary_lines(stats["cupti"]):
                print(f"xpu-perf record: {line}", file=sys.stderr)
            if not stats["cupti"].get("streams"):
                print(
                    "xpu-perf record: no GPU activity: no process of the target initialised "
                    "CUDA (no GPU visible, no CUDA use, or CUDA linked statically without "
                    "injection support); the trace has no GPU tracks",
                    file=sys.stderr,
                )
        if plan.windowed:
            windows = sum(s.get("windows", 0) for s in stats.values())
            ignored = stats.get("cupti", {}).get("windows_ignored", 0)
            print(f"xpu-perf record: {window_summary(windows, ignored, plan)}", file=sys.stderr)
            untracked = stats.get("cupti", {}).get("nvtx_ranges_untracked", 0)
            if untracked:
                print(
                    f"xpu-perf record: {untracked} NVTX ranges could not be followed for "
                    f"--capture-range {plan.mode} (too many domains or open ranges): a window "
                    "may have ended late or not opened",
                    file=sys.stderr,
                )
        if "cpu" in stats:
            for line in cpu_summary_lines(stats["cpu"], freq):
                print(f"xpu-perf record: {line}", file=sys.stderr)
        if "ebpf_launch" in stats:
            launch = stats["ebpf_launch"]
            lost = {
                k: v for k, v in launch.items() if v and k not in ("stacks", "unresolved_frames")
            }
            print(
                f"xpu-perf record: eBPF launch stacks (cudaLaunchKernel/cuLaunchKernel): "
                f"{launch.get('stacks', 0)}, lost/errors: {lost or 'none'}",
                file=sys.stderr,
            )
        if "ebpf" in stats:
            ebpf = stats["ebpf"]
            quiet = ("cpu_samples", "bpf_runs", "bpf_run_ns", "unresolved_frames")
            lost = {k: v for k, v in ebpf.items() if v and k not in quiet}
            print(
                f"xpu-perf record: cpu samples: {ebpf.get('cpu_samples', 0)} at {freq} Hz, "
                f"lost/errors: {lost or 'none'}, "
                f"unresolved frames: {ebpf.get('unresolved_frames', 0)}",
                file=sys.stderr,
            )
        cut = size_limit.summary() if size_limit else None
        if cut:
            print(f"xpu-perf record: {cut}", file=sys.stderr)
        print(f"xpu-perf record: wrote {args.output}", file=sys.stderr)
    return code


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
