"""Which sources a recording runs, from its options: the GPU recording (with its launch
stacks from the in-process unwinder or from eBPF uprobes), and a CPU sampler (in-process, or
eBPF as root).  What cannot run here is said in one line, or fails the recording when
nothing would be left to record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from collector.errors import UserError
from collector.inject_build import BuildError, build, build_sampler
from collector.launch_join import EbpfLaunchStacks
from collector.recording.cpu import InprocessCpuRecording
from collector.recording.gpu import CuptiRecording
from collector.recording.gpu_metrics import GpuMetricsRecording
from collector.recording.kept_streams import (
    CPU_STREAMS,
    GPU_METRICS,
    GPU_STREAMS,
    PYTHON_NAMES,
    StreamsDir,
)
from collector.recording.libraries import loadable_by_target
from collector.recording.options import RecordOptions, check_freq
from collector.recording.python_names import PythonNames
from collector.recording.source import RecordSource, SharedSymbols
from collector.recording.summary import say
from collector.setup_check import Problem, check_ebpf
from collector.sources.bcc_sampler import BccCpuSampler, BccKernelModeSampler
from collector.sources.bcc_uprobes import CUDA_LAUNCH_PROBES, BccLaunchUprobes, marker_probe

# What `--launch-stacks auto` picks when the GPU is recorded: the in-process unwinder, from the
# H100 comparison in docs/benchmarks.md (eBPF's frame-pointer walk stops in libraries built
# without frame pointers, such as libcupti and libtorch_cuda).
AUTO_WITH_GPU = "inprocess"


@dataclass(frozen=True)
class Selection:
    """The sources to run, in start order, and the CPU sampling rate (0: no CPU samples)."""

    sources: list[RecordSource]
    freq: int


def select_sources(options: RecordOptions, streams: StreamsDir | None = None) -> Selection:
    """The sources the options ask for, as far as this machine can run them; those whose
    target writes streams write them under `streams` (kept if the trace cannot be written)."""
    needs_ebpf = options.cpu or options.launch_stacks in ("ebpf", "auto")
    ebpf_problems = check_ebpf() if needs_ebpf else []
    stacks, note = resolve_launch_stacks(options.launch_stacks, options.gpu, ebpf_problems)
    if note:
        say(note)
    sources = gpu_sources(options, stacks, streams)
    if options.gpu_metrics_hz is not None:
        # After the GPU recording: it gets that source's capture windows to keep to, and
        # what PM sampling did in the target (the preferred source where it ran).
        # record writes them itself: a directory of root's, not the target's user's.
        metrics_dir = (
            streams.subdir(GPU_METRICS, target_writes=False) if streams is not None else None
        )
        cupti = next((s for s in sources if isinstance(s, CuptiRecording)), None)
        if cupti is None:
            cupti = next(
                (
                    s.gpu
                    for s in sources
                    if isinstance(s, EbpfLaunchStacks) and isinstance(s.gpu, CuptiRecording)
                ),
                None,
            )
        if cupti is not None:
            cupti.pm_sampling_hz = options.gpu_metrics_hz
        sources.append(
            GpuMetricsRecording(
                options.gpu_metrics_hz,
                directory=metrics_dir,
                pm_sampling=cupti.pm_sampling if cupti is not None else None,
            )
        )
    freq = 0
    if options.cpu:
        cpu, freq = cpu_source(options, ebpf_problems, streams)
        sources += [cpu] if cpu is not None else []
    if not sources:
        raise UserError("nothing to record (--no-gpu, and CPU sampling is unavailable)")
    shared = SharedSymbols()  # each library's symbol tables read once for all the sources
    for source in sources:
        if isinstance(source, (CuptiRecording, InprocessCpuRecording)):
            source.symbols = shared
    if options.python_names:
        # The names the target's Python knows (threading's, multiprocessing's), for all sources.
        names_dir = streams.subdir(PYTHON_NAMES) if streams is not None else None
        sources.append(PythonNames(names_dir))
    return Selection(sources, freq)


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


def gpu_sources(
    options: RecordOptions, stacks: str, streams: StreamsDir | None = None
) -> list[RecordSource]:
    """The GPU recording with launch stacks in mode `stacks` (resolved); without the GPU,
    the eBPF launch probes alone when that mode is ebpf."""
    if not options.gpu:
        return [BccLaunchUprobes(CUDA_LAUNCH_PROBES)] if stacks == "ebpf" else []
    try:
        library = build()
    except BuildError as exc:
        raise UserError(str(exc)) from None
    try:
        # Preloaded for its process hooks even without CPU sampling (the final flush at
        # _exit, at a signal the process sends itself, before an exec).
        process_hooks: Path | None = build_sampler()
    except BuildError:
        process_hooks = None
    cupti = CuptiRecording(
        library,
        stacks=stacks == "inprocess",
        python_frames=options.python_frames,
        kinds=options.kinds,
        keep_streams=options.keep_streams,
        capture=options.plan,
        directory=streams.subdir(GPU_STREAMS) if streams is not None else None,
        process_hooks=process_hooks,
        program_profiler=options.program_profiler,
    )
    if stacks == "ebpf":
        # The library's unwinder is off; a uprobe on its launch marker takes each stack (in
        # the copy the target loads).
        probe = marker_probe(str(loadable_by_target(library)))
        return [EbpfLaunchStacks(cupti, BccLaunchUprobes([probe]))]
    return [cupti]


def cpu_source(
    options: RecordOptions, ebpf_problems: Sequence[Problem], streams: StreamsDir | None = None
) -> tuple[RecordSource | None, int]:
    """The CPU sampler and its rate; (None, 0) when the eBPF one cannot run here (said)."""
    if options.cpu_sampler != "ebpf":
        freq = check_freq(options.freq)
        try:
            sampler = build_sampler()
        except BuildError as exc:
            raise UserError(str(exc)) from None
        # As root with eBPF: kernel frames on top of the samples taken in the kernel.
        kernel = None if ebpf_problems or not options.kernel_stacks else BccKernelModeSampler(freq)
        cpu = InprocessCpuRecording(
            sampler,
            freq,
            python_frames=options.python_frames,
            kernel=kernel,
            kernel_from_start=options.kernel_from_start,
            wait_threshold_us=options.wait_threshold_us,
            directory=streams.subdir(CPU_STREAMS) if streams is not None else None,
        )
        return cpu, freq
    if ebpf_problems:
        say("CPU sampling skipped: " + "; ".join(map(str, ebpf_problems)))
        return None, 0
    # Started before the target, like every source.
    return BccCpuSampler(options.freq), options.freq
