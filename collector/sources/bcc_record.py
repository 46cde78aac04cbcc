"""Standalone eBPF recording: run a command under the bcc sources and write one trace.

    python -m collector.sources.bcc_record -o out.perfetto-trace [--freq 99] \
        [--uprobe LIB:SYMBOL]... [--marker LIB] [--duration S] -- CMD...

What `xpu-perf record --no-gpu` does with the CPU sampler and launch uprobes, kept as a thin
entry for tests and for bringing eBPF up on a new machine; `record` composes the same
sources (see `run_target` and `write_sources` for the order that matters).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector.sources.bcc_process_tree import ProcessTree
from collector.sources.bcc_sampler import DEFAULT_FREQ_HZ, BccCpuSampler
from collector.sources.bcc_source import BccSource
from collector.sources.bcc_uprobes import BccLaunchUprobes, LaunchProbe, marker_probe
from exporters.perfetto.writer import TraceWriter

# After Ctrl-C / --duration the target gets SIGINT, then SIGTERM, then SIGKILL, this far apart.
_STOP_GRACE_S = 2.0


def target_credentials() -> dict[str, object]:
    """Under sudo, run the target as the invoking user (SUDO_UID/SUDO_GID) rather than root."""
    uid, gid = os.environ.get("SUDO_UID"), os.environ.get("SUDO_GID")
    if os.geteuid() != 0 or not uid or not gid:
        return {}
    import pwd

    try:
        groups = os.getgrouplist(pwd.getpwuid(int(uid)).pw_name, int(gid))
    except KeyError:
        groups = [int(gid)]
    return {"user": int(uid), "group": int(gid), "extra_groups": groups}


class _Interrupt:
    """SIGINT/SIGTERM to the recorder: stop recording, pass the signal on to the target."""

    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum: int, _frame: object) -> None:
        self.signal = signum


def run_target(
    cmd: Sequence[str], sources: Sequence[BccSource], duration: float | None = None
) -> int:
    """Start `sources` (already constructed), then `cmd`; wait for it, Ctrl-C or the
    duration; stop the sources.  Returns the target's exit status (128+N if killed by N)."""
    for source in sources:
        source.start(ProcessTree.spawned_by_self())  # before the target: no early sample lost
    interrupt = _Interrupt()
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM)}
    proc = None
    try:
        try:
            proc = subprocess.Popen(list(cmd), **target_credentials())  # type: ignore[call-overload]
        finally:
            for source in sources:
                if proc is not None:
                    source.target_started(proc.pid)
                else:
                    source.target_started(0)
        deadline = time.monotonic() + duration if duration else None
        stopping_since: float | None = None
        escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
        while proc.poll() is None:
            due = deadline is not None and time.monotonic() >= deadline
            if (interrupt.signal is not None or due) and stopping_since is None:
                stopping_since = time.monotonic() - _STOP_GRACE_S  # send the first at once
            if stopping_since is not None and time.monotonic() - stopping_since >= _STOP_GRACE_S:
                if escalation:
                    proc.send_signal(escalation.pop(0))
                stopping_since = time.monotonic()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=0.05)
        code = proc.returncode
        return 128 - code if code < 0 else code
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for source in sources:
            source.stop()


def write_sources(
    out: Path, sources: Sequence[BccSource], command_line: Sequence[str], freq: int
) -> dict[str, dict[str, int]]:
    """Write the stopped sources' events, each through its own producer, and their counters
    as metadata `<source>.<counter>` (what `record` does for every source)."""
    stats: dict[str, dict[str, int]] = {}
    with TraceWriter(
        out,
        command_line=command_line,
        clock_id=pb.BUILTIN_CLOCK_MONOTONIC,  # bpf_ktime_get_ns()
        sample_frequency_hz=freq,
    ) as writer:
        for source in sources:
            writer.producer(source.name).write_all(source.events())
            stats[source.name] = source.stats()
            for key, value in stats[source.name].items():
                writer.set_metadata(f"{source.name}.{key}", value)
        if any(isinstance(source, BccCpuSampler) for source in sources):
            writer.set_metadata("cpu_sample_frequency_hz", freq)  # read by `folded`
    return stats


def _parse_probe(text: str) -> LaunchProbe:
    library, sep, symbol = text.rpartition(":")
    if not sep or not library or not symbol:
        raise argparse.ArgumentTypeError(f"expected LIBRARY:SYMBOL, got {text!r}")
    return LaunchProbe(symbol, os.path.abspath(library) if "/" in library else library)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m collector.sources.bcc_record", description=__doc__.split("\n")[0]
    )
    parser.add_argument("-o", "--output", type=Path, default=Path("ebpf.perfetto-trace"))
    parser.add_argument(
        "--freq", type=int, default=DEFAULT_FREQ_HZ, help="CPU samples per second of CPU time"
    )
    parser.add_argument("--no-cpu", action="store_true", help="no CPU sampler")
    parser.add_argument(
        "--uprobe", type=_parse_probe, action="append", default=[], metavar="LIB:SYMBOL"
    )
    parser.add_argument("--marker", metavar="LIB", help="library exporting the launch marker")
    parser.add_argument("--duration", type=float, help="stop after this many seconds")
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        parser.error("no command given (put it after --)")
    sources: list[BccSource] = []
    if not args.no_cpu:
        sources.append(BccCpuSampler(args.freq))
    probes = list(args.uprobe) + (
        [marker_probe(os.path.abspath(args.marker))] if args.marker else []
    )
    if probes:
        sources.append(BccLaunchUprobes(probes))
    code = run_target(cmd, sources, args.duration)
    stats = write_sources(args.output, sources, [sys.argv[0], *cmd], args.freq)
    for name, counters in stats.items():
        summary = " ".join(f"{k}={v}" for k, v in counters.items())
        print(f"bcc_record: {name}: {summary}", file=sys.stderr)
    print(f"bcc_record: wrote {args.output}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
