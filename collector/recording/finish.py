"""The end of a recording, once the target is gone and the sources stopped: the trace
written (or, if it cannot be, or record was asked to stop, the streams kept with the
command that finishes), the summary said, and record's exit status."""

from __future__ import annotations

import signal

from collector.errors import Terminated, UserError
from collector.recording.keep import keep_streams
from collector.recording.kept_streams import StreamsDir
from collector.recording.options import RecordOptions
from collector.recording.selection import Selection
from collector.recording.size_limit import SizeLimit
from collector.recording.summary import say, summary
from collector.recording.target import Interrupt, stop_error
from collector.recording.trace import write_trace
from collector.recording.windows import TreeWindows


def finish(
    options: RecordOptions,
    selection: Selection,
    streams: StreamsDir,
    code: int,
    interrupt: Interrupt,
    size_limit: SizeLimit | None,
    tree: TreeWindows | None,
) -> int:
    """The trace or the kept streams; returns the target's status `code`, or 128+N when
    signal N asked record itself to stop (Interrupt): then the trace is complete or the
    streams are kept, and one line says which."""
    stopped = interrupt.stop_signal
    kept = streams.has_streams()
    if stopped is not None and kept:
        # Asked to stop as the target ended: the streams, not minutes of writing.
        keep_streams(streams, options.output, stop_error(stopped), size_limit, tree)
        return 128 + stopped
    try:
        stats = write_trace(
            options.output,
            selection.sources,
            ["xpu-perf", "record", "--", *options.cmd],
            selection.freq,
            capture=options.plan,
            size_limit=size_limit,
            tree=tree,
            # Nothing on disk to keep (eBPF sources hold theirs in memory): a signal must
            # not throw the recording away, so the trace is finished first.
            check_stop=interrupt.check if kept else None,
        )
    except (OSError, UserError, KeyboardInterrupt, Terminated) as exc:
        keep_streams(streams, options.output, exc, size_limit, tree)
        if interrupt.stop_signal is not None:
            return 128 + interrupt.stop_signal
        return code  # the target's status, as always: the recording is not lost
    streams.remove()
    if not options.quiet:
        said = summary(
            stats, options.plan, selection.freq, size_limit, options.output, selection.sources
        )
        for line in said:
            say(line)
    if interrupt.stop_signal is not None:
        name = signal.Signals(interrupt.stop_signal).name
        say(f"stopped by {name}; the trace {options.output} is complete")
        return 128 + interrupt.stop_signal
    return code
