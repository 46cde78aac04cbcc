"""What `record` tells the user on stderr, each line prefixed `xpu-perf record: `: how to
drive a signal window before the run, and after it the summary of what was recorded and
lost, source by source (the same counters are in the trace's metadata)."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from collector.recording.disk_space import StreamsDisk, disk_full, disk_summary_lines
from collector.recording.size_limit import SizeLimit
from collector.recording.source import (
    DescribedSource,
    NotedSource,
    RecordSource,
    process_accounts,
)
from collector.recording.windows import CapturePlan, window_summary
from collector.visible_text import printable_lines

PREFIX = "xpu-perf record: "


def say(line: str) -> None:
    """One line for the user, on stderr (stdout is the target's)."""
    print(printable_lines(f"{PREFIX}{line}"), file=sys.stderr)  # names from the target


def toggle_hint(plan: CapturePlan, pid: int) -> str | None:
    """With --capture-range signal: which signal to send to whom (record's own pid)."""
    sig = plan.toggle_signal
    if sig is None:
        return None
    return (
        f"window closed; send {sig.name} to {pid} to open it and again to close it "
        f"(kill -{sig.name[3:]} {pid})"
    )


def summary(
    stats: Mapping[str, Mapping[str, int]],
    plan: CapturePlan,
    freq: int,
    size_limit: SizeLimit | None,
    output: Path,
    sources: Sequence[RecordSource] = (),
) -> list[str]:
    """The end-of-record summary: each source's part (by the name it wrote its counters
    under), the capture windows, the --max-size cut, the trace written.  `sources` (after
    their events were written): the processes without their final data and those not
    recorded at all (source.process_accounts), and what a source says beyond its counters
    (source.NotedSource, source.DescribedSource)."""
    accounts = process_accounts(sources)
    full = disk_full(stats)
    lines = []
    if "cupti" in stats:
        lines += gpu_summary_lines(stats["cupti"], accounts.get("cupti", {}), full)
        if not stats["cupti"].get("streams"):
            lines.append(
                "no GPU activity: no process of the target initialised "
                "CUDA (no GPU visible, no CUDA use, or CUDA linked statically without "
                "injection support); the trace has no GPU tracks"
            )
    for source in sources:  # what a source words itself: the GPU's part, the GPU counters
        if isinstance(source, (NotedSource, DescribedSource)):
            lines += source.summary_lines()
    if plan.windowed:
        windows = sum(s.get("windows", 0) for s in stats.values())
        ignored = stats.get("cupti", {}).get("windows_ignored", 0)
        lines.append(window_summary(windows, ignored, plan))
        untracked = stats.get("cupti", {}).get("nvtx_ranges_untracked", 0)
        if untracked:
            lines.append(
                f"{untracked} NVTX ranges could not be followed for "
                f"--capture-range {plan.mode} (too many domains or open ranges): a window "
                "may have ended late or not opened"
            )
    if "cpu" in stats:
        lines += cpu_summary_lines(stats["cpu"], freq, accounts.get("cpu", {}), full)
    for source in sources:
        if isinstance(source, StreamsDisk):
            lines += disk_summary_lines(stats, source.directory)
    if "ebpf_launch" in stats:
        lines.append(ebpf_launch_line(stats["ebpf_launch"]))
    if "ebpf" in stats:
        lines.append(ebpf_cpu_line(stats["ebpf"], freq))
    cut = size_limit.summary() if size_limit else None
    if cut:
        lines.append(cut)
    lines.append(f"wrote {output}")
    return lines


def named(processes: Sequence[str], limit: int = 8) -> str:
    """'pid 1 (a), pid 2 (b), ... and N more'."""
    more = len(processes) - limit
    return ", ".join(processes[:limit]) + (f" and {more} more" if more > 0 else "")


def duration(ns: int) -> str:
    """A CPU time for the summary: ms below a second (0.0 s said nothing)."""
    return f"{ns / 1e9:.2f} s" if ns >= 1_000_000_000 else f"{ns / 1e6:.1f} ms"


def gpu_summary_lines(
    cupti: Mapping[str, int],
    accounts: Mapping[str, Sequence[str]] | None = None,
    disk_full: bool = False,
) -> list[str]:
    """The GPU part of the end-of-record summary (`disk_full`: the streams' file system
    filled up, which cut the streams short, not a kill)."""
    ops = cupti.get("gpu_ops", 0)
    launches = cupti.get("launches", 0)
    lines = [
        f"records: kernel={cupti.get('records_kernel', 0)} memcpy={cupti.get('records_memcpy', 0)} "
        f"memset={cupti.get('records_memset', 0)} sync={cupti.get('records_sync', 0)} "
        f"api={cupti.get('records_api', 0)} nvtx={cupti.get('records_marker', 0)} "
        f"memory={cupti.get('records_memory', 0)} (processes={cupti.get('streams', 0)})",
        f"dropped: cupti={cupti.get('cupti_dropped_records', 0)} "
        f"transport={cupti.get('transport_dropped_rows', 0)} "
        f"unwritten={cupti.get('unwritten_gpu_records', 0)}",
        f"gpu ops without api call: {cupti.get('gpu_ops_without_api', 0)} of {ops}",
        f"launches without stack: {cupti.get('launches_without_stack', 0)} of {launches}",
    ]
    unmatched = cupti.get("memory_frees_unmatched", 0)
    if unmatched:
        lines.append(
            f"device memory: {unmatched} releases of memory allocated before the recording "
            "(or outside its windows) are not in `device memory in use`"
        )
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
        # the process did in its last second before it died is not in the trace.  (_exit,
        # exec and a signal the process sends itself flush: process_hooks.h.)
        who = (accounts or {}).get("without_final_data", ())
        why = unflushed_why(cupti, disk_full, "killed or crashed")
        lines.append(
            f"{unflushed} of {cupti.get('streams', 0)} processes ended without their final "
            f"flush ({why}): up to their last second of GPU activity and API calls "
            "is missing" + (f": {named(who)}" if who else "")
        )
    lines += rejected_line(cupti, "GPU")
    reopened = cupti.get("transport_reopened", 0)
    if reopened or cupti.get("transport_lost_bytes", 0):
        lines.append(
            f"the target closed or replaced the GPU streams' descriptors {reopened} times "
            f"(reopened); {cupti.get('transport_lost_bytes', 0)} bytes could not be written"
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


def kernel_attach_lines(cpu: Mapping[str, int], freq: int) -> list[str]:
    """When the eBPF kernel-mode sampler (compiled while the target ran) began, and the
    kernel-mode CPU time before then, which has no sample."""
    if "kernel_unsampled_ms" not in cpu:
        return []
    missed = (
        f"{cpu['kernel_unsampled_ms']} ms of kernel-mode CPU time unsampled "
        f"(~{cpu.get('kernel_unsampled_samples', 0)} samples at {freq} Hz)"
    )
    delay = cpu.get("kernel_attach_delay_ms", -1)
    if cpu.get("kernel_sampler_failed"):
        when = "the eBPF kernel-mode sampler failed"
    elif delay < 0:
        when = "the target ended before the eBPF kernel-mode sampler was compiled"
    else:
        when = f"the eBPF kernel-mode sampler began {delay / 1000:.2f} s after the target"
    return [f"cpu samples in the kernel: {when}; before it, {missed}"]


def cpu_summary_lines(
    cpu: Mapping[str, int],
    freq: int,
    accounts: Mapping[str, Sequence[str]] | None = None,
    disk_full: bool = False,
) -> list[str]:
    """The in-process CPU sampler's part of the end-of-record summary (`disk_full`: the
    streams' file system filled up, which cut the streams short, not a kill)."""
    accounts = accounts or {}
    samples = cpu.get("samples", 0)
    from collector.sources.cpu_stream import UNWIND_ENDS

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
        *kernel_attach_lines(cpu, freq),
        f"cpu samples stopped early: {stopped or 'none'}; lost: "
        f"ring_full={cpu.get('samples_ring_full', 0)} "
        f"transport={cpu.get('transport_dropped_rows', 0)} "
        f"timers_failed={cpu.get('timers_failed', 0)} "
        f"unwritten={cpu.get('unwritten_cpu_samples', 0)}",
    ]
    stackless = cpu.get("stack_table_full", 0), cpu.get("wait_stack_table_full", 0)
    if any(stackless):
        lines.append(
            f"{stackless[0]} cpu samples and {stackless[1]} blocked calls were kept without "
            "their stack: their process's stack table was full (its bound of distinct stacks)"
        )
    unflushed = cpu.get("streams_without_counters", 0)
    if cpu.get("process_ns", 0):
        # Both sides from the same processes' final counters: those of a process killed
        # before its final flush are unknown, and so is its CPU time.
        own = cpu.get("handler_ns", 0) + cpu.get("scanner_ns", 0)
        reported = cpu.get("streams", 0) - unflushed
        lines.append(
            f"sampler's own CPU time: {duration(own)} = {100 * own / cpu['process_ns']:.2f}% "
            f"of the {duration(cpu['process_ns'])} of CPU time of the {reported} sampled "
            "processes that reported it"
            + (f" (unknown for the {unflushed} that ended without it)" if unflushed else "")
        )
    lines.append(wait_summary_line(cpu))
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
    if unflushed:
        who = accounts.get("without_final_data", ())
        why = unflushed_why(cpu, disk_full, "killed")
        lines.append(
            f"{unflushed} of {cpu.get('streams', 0)} sampled processes "
            f"ended without their final flush ({why}): their last samples are missing"
            + (f": {named(who)}" if who else "")
        )
    lines += rejected_line(cpu, "CPU")
    reopened = cpu.get("transport_reopened", 0) + cpu.get("clocks_restarted", 0)
    if reopened or cpu.get("transport_lost_bytes", 0):
        lines.append(
            f"the target closed or replaced the sampler's descriptors {reopened} times "
            f"(streams reopened: {cpu.get('transport_reopened', 0)}, clocks restarted: "
            f"{cpu.get('clocks_restarted', 0)}); "
            f"{cpu.get('transport_lost_bytes', 0)} bytes could not be written"
        )
    missing = accounts.get("not_recorded", ())
    if missing:
        lines.append(
            f"{len(missing)} processes of the target's tree were not sampled (no stream: the "
            "sampler library was not loaded, e.g. an environment without LD_PRELOAD or a static "
            f"binary, or could not write): {named(missing)}"
        )
    return lines


def unflushed_why(counts: Mapping[str, int], disk_full: bool, otherwise: str) -> str:
    """Why streams lack their final counters: a full disk, their own write errors (the final
    flush ran: its UNWRITTEN block says so), else `otherwise` (a kill)."""
    if disk_full:
        return "the disk was full, said below"
    if counts.get("streams_counters_unwritten", 0) >= counts.get("streams_without_counters", 0):
        return "their final counters could not be written, said below"
    return otherwise


def wait_summary_line(cpu: Mapping[str, int]) -> str:
    """Blocked time: the waits recorded, their total, and every one lost."""
    threshold = cpu.get("wait_threshold_ns", 0)
    if not threshold:
        return "blocked calls: not recorded (--wait-threshold 0)"
    lost = {
        "ring_full": cpu.get("waits_ring_full", 0),
        "no_memory": cpu.get("waits_no_memory", 0),
        "transport": cpu.get("transport_dropped_rows", 0),
        "unwritten": cpu.get("unwritten_waits", 0),
    }
    outside = cpu.get("waits_outside_window", 0)
    return (
        f"blocked calls of {duration(threshold)} or more: {cpu.get('waits', 0)}, "
        f"{duration(cpu.get('wait_ns', 0))} in all; lost: "
        + " ".join(f"{k}={v}" for k, v in lost.items())
        + (f"; {outside} outside the capture windows not kept" if outside else "")
    )


def ebpf_launch_line(launch: Mapping[str, int]) -> str:
    """The eBPF launch probes' line (launch stacks without the GPU recording)."""
    lost = {k: v for k, v in launch.items() if v and k not in ("stacks", "unresolved_frames")}
    return (
        f"eBPF launch stacks (cudaLaunchKernel/cuLaunchKernel): "
        f"{launch.get('stacks', 0)}, lost/errors: {lost or 'none'}"
    )


def ebpf_cpu_line(ebpf: Mapping[str, int], freq: int) -> str:
    """The eBPF CPU sampler's line."""
    quiet = ("cpu_samples", "bpf_runs", "bpf_run_ns", "unresolved_frames", "samples_outside_window")
    lost = {k: v for k, v in ebpf.items() if v and k not in quiet}
    # Taken in the pause's lag after a window closed: not lost, outside what was asked for.
    outside = ebpf.get("samples_outside_window", 0)
    return (
        f"cpu samples: {ebpf.get('cpu_samples', 0)} at {freq} Hz, "
        f"lost/errors: {lost or 'none'}, "
        f"unresolved frames: {ebpf.get('unresolved_frames', 0)}"
        + (f", {outside} taken just after a capture window dropped" if outside else "")
    )


def rejected_line(counts: Mapping[str, int], which: str) -> list[str]:
    """The files found where the streams go that were not read (each was said above)."""
    rejected = counts.get("streams_rejected", 0)
    if not rejected:
        return []
    return [
        f"{rejected} files among the {which} streams were rejected, not read: not a regular "
        "file that its directory's user wrote (a FIFO or a link planted there)"
    ]
