"""What `record` does when its trace cannot be written, and `record --from-streams`: the
recording's streams kept (collector/recording/kept_streams.py), one line saying where and
the command that writes the trace from them later, and that command."""

from __future__ import annotations

import argparse
import shutil
import signal
from pathlib import Path

from collector.errors import Terminated, UserError
from collector.files import check_output
from collector.recording.kept_streams import StreamsDir, kept_sources, load_manifest
from collector.recording.size_limit import SizeLimit
from collector.recording.summary import say, summary
from collector.recording.trace import write_trace
from collector.recording.windows import CapturePlan, TreeWindows


def keep_streams(
    streams: StreamsDir,
    output: Path,
    exc: BaseException,
    size_limit: SizeLimit | None,
    tree: TreeWindows | None,
) -> None:
    """The trace could not be written (an error, or a signal that stopped record): keep
    the streams and say, in one line, where they are and the command that writes the trace
    from them."""
    if isinstance(exc, (KeyboardInterrupt, Terminated)):
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        what = f"error: stopped by {signal.Signals(signum).name} before {output} was written"
    elif isinstance(exc, OSError):
        what = f"error: cannot write {output}: {exc.strerror or exc}"
    else:
        what = f"error: cannot write {output}: {exc}"
    if not streams.has_streams():
        streams.remove()
        say(f"{what}; the recording is lost (nothing on disk)")
        return
    metadata = size_limit.metadata() if size_limit is not None else {}
    if tree is not None and tree.plan.toggle_signal is not None:
        metadata["toggles"] = tree.toggles
    streams.add_to_manifest(metadata, list(tree.windows) if tree is not None else [])
    streams.hand_over()
    say(
        f"{what}; the recording is kept in {streams.path}: "
        f"write the trace later with: xpu-perf record --from-streams {streams.path} -o {output}"
    )


def write_kept(args: argparse.Namespace) -> int:
    """`record --from-streams DIR -o OUT`: the trace of a recording whose streams were kept;
    the directory is removed once the trace is written."""
    if args.cmd:
        raise UserError("--from-streams runs nothing: give no command")
    directory: Path = args.from_streams
    if not directory.is_dir():
        raise UserError(f"no such directory: {directory}")
    manifest = load_manifest(directory)
    rejected: list[str] = []
    sources = kept_sources(directory, rejected)
    if not sources:
        raise UserError(f"{directory} holds no streams")
    check_output(args.output)
    try:
        stats = write_trace(
            args.output,
            sources,
            manifest.command_line,
            manifest.freq,
            capture=CapturePlan(mode=manifest.capture_mode),
            kept=manifest,
        )
    except OSError as exc:
        raise UserError(f"cannot write {args.output}: {exc.strerror} (the streams stay)") from None
    unread = rejected + [
        f"{count} {name} streams"
        for name, counts in stats.items()
        if (count := counts.get("streams_unreadable", 0) + counts.get("streams_rejected", 0))
    ]
    if not args.quiet:
        plan = CapturePlan(mode=manifest.capture_mode)
        for line in summary(stats, plan, manifest.freq, None, args.output, sources):
            say(line)
    if unread:
        # What could not be read stays where it is, for a look or another try.
        say(
            f"{directory} is kept: {', '.join(unread)} could not be read (said above); "
            f"the trace has everything else"
        )
    else:
        shutil.rmtree(directory, ignore_errors=True)
    return 0
