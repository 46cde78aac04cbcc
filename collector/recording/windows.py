"""Capture windows on `record`'s side: which window mode the options ask for, the settings the
injection library reads, and the windows of the whole process tree that `record` itself opens
and closes (--delay/--duration on its clock, --capture-range signal from outside).

Every window mode shares one control page with the target's processes (collector/
window_control.py): `record` writes `tree_open`, the injection library in each process counts
the windows it opened itself (cudaProfilerApi, NVTX), and the CPU sampler samples only while
some window is open.
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TypeAlias

from collector import model
from collector.errors import UserError
from collector.recording.credentials import share_with_target
from collector.window_control import WindowControl

# What signal.signal() returns and takes: the handler a signal had before, to restore it.
SignalHandler: TypeAlias = (
    "Callable[[int, FrameType | None], object] | int | signal.Handlers | None"
)

PROFILER_API = "cudaProfilerApi"
SIGNAL = "signal"
NVTX_PREFIX = "nvtx:"
# The program's own torch.profiler: its active trace steps (cupti_inject/src/program_profiler.c).
TORCH_PROFILER = "torch-profiler"
DELAY = "delay"
CAPTURE_RANGE_HELP = "cudaProfilerApi | nvtx:NAME[@DOMAIN] | signal | torch-profiler"
DEFAULT_TOGGLE_SIGNAL = "SIGUSR2"


@dataclass(frozen=True)
class CapturePlan:
    """What the options ask for: `mode` is "" (the whole run), cudaProfilerApi, nvtx:NAME,
    signal or delay; `library_env` the injection library's settings for it."""

    mode: str = ""
    library_env: Mapping[str, str] = field(default_factory=dict)
    delay_s: float | None = None
    duration_s: float | None = None  # with --delay: the window's length
    toggle_signal: signal.Signals | None = None

    @property
    def windowed(self) -> bool:
        return bool(self.mode)

    @property
    def in_process(self) -> bool:
        """Windows the target's own calls open (the injection library must see them)."""
        return self.mode in (PROFILER_API, TORCH_PROFILER) or self.mode.startswith(NVTX_PREFIX)


def capture_range_end(value: str) -> int:
    """--capture-range-end as the library's window limit: stop = 1, repeat = 0 (every
    window), repeat:N = N."""
    if value == "stop":
        return 1
    if value == "repeat":
        return 0
    count = value.removeprefix("repeat:")
    if count != value and count.isdigit() and int(count) > 0:
        return int(count)
    raise UserError(f"--capture-range-end {value}: give stop, repeat or repeat:N (N >= 1)")


def parse_toggle_signal(name: str) -> signal.Signals:
    """--toggle-signal: a signal name (USR2, SIGUSR2) or number, one record may take over."""
    text = name.upper()
    try:
        sig = (
            signal.Signals(int(text))
            if text.isdigit()
            else signal.Signals[f"SIG{text.removeprefix('SIG')}"]
        )
    except (KeyError, ValueError):
        raise UserError(f"--toggle-signal {name}: not a signal name (e.g. SIGUSR2)") from None
    if sig in (signal.SIGKILL, signal.SIGSTOP, signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
        raise UserError(f"--toggle-signal {name}: record needs that one; use SIGUSR1 or SIGUSR2")
    return sig


def _check_nvtx(spec: str) -> None:
    name, _, domain = spec.partition("@")
    if not name or ("@" in spec and not domain):
        raise UserError(
            f"--capture-range nvtx:{spec}: give nvtx:NAME or nvtx:NAME@DOMAIN (the NVTX range "
            "name, and the domain it is in when not the default one)"
        )


def capture_plan(args: argparse.Namespace) -> CapturePlan:
    """The window mode from the options, checked."""
    rng: str | None = args.capture_range
    if args.capture_range_end is not None and rng is None:
        raise UserError("--capture-range-end needs --capture-range")
    if args.toggle_signal is not None and rng != SIGNAL:
        raise UserError("--toggle-signal needs --capture-range signal")
    if args.duration is not None and args.duration <= 0:
        raise UserError(f"--duration {args.duration}: give a number of seconds > 0")
    if rng is not None:
        if args.delay is not None:
            raise UserError("--delay and --capture-range are exclusive: give one of them")
        if args.duration is not None:
            raise UserError("--duration with --capture-range is not supported (drop one)")
        if rng not in (PROFILER_API, SIGNAL, TORCH_PROFILER) and not rng.startswith(NVTX_PREFIX):
            raise UserError(f"--capture-range {rng}: give {CAPTURE_RANGE_HELP}")
        if rng.startswith(NVTX_PREFIX):
            _check_nvtx(rng.removeprefix(NVTX_PREFIX))
        # Each toggle is asked for by hand, and a profiler schedule's repeats are the
        # program's own choice: every one counts unless --capture-range-end says.
        default_end = "repeat" if rng in (SIGNAL, TORCH_PROFILER) else "stop"
        limit = capture_range_end(args.capture_range_end or default_end)
        toggle = parse_toggle_signal(args.toggle_signal or DEFAULT_TOGGLE_SIGNAL)
        return CapturePlan(
            mode=rng,
            library_env={"XPU_PERF_CAPTURE_RANGE": rng, "XPU_PERF_CAPTURE_RANGE_END": str(limit)},
            toggle_signal=toggle if rng == SIGNAL else None,
        )
    if args.delay is None:
        return CapturePlan()
    if args.delay < 0:
        raise UserError(f"--delay {args.delay}: give a number of seconds >= 0")
    env = {"XPU_PERF_WINDOW_DELAY_MS": str(round(args.delay * 1000))}
    if args.duration is not None:
        env["XPU_PERF_WINDOW_DURATION_MS"] = str(max(1, round(args.duration * 1000)))
    return CapturePlan(DELAY, env, delay_s=args.delay, duration_s=args.duration)


class TreeWindows:
    """The windows `record` opens for the whole tree: --delay/--duration on its own clock
    and the toggle signal of --capture-range signal.  Owns the control page every process of
    the target maps; keeps the windows it opened (the trace's window slices when no injection
    library records them, as under --no-gpu)."""

    def __init__(self, plan: CapturePlan) -> None:
        self.plan = plan
        self._directory = Path(tempfile.mkdtemp(prefix="xpu-perf-window-"))
        path = self._directory / "control"
        self.control = WindowControl(path)
        # Every process of the target maps it read-write (its libraries count their windows
        # in it): under sudo the target runs as the user, who gets the directory and file.
        share_with_target(self._directory)
        share_with_target(path)
        self.pid = 0
        self.toggles = 0
        self.windows: list[model.CaptureWindow] = []
        self._open_since: int | None = None
        self._open_reason = ""
        self._open_at: int | None = None  # --delay: CLOCK_MONOTONIC ns of the opening
        self._close_at: int | None = None
        self._previous_handler: SignalHandler = None
        if plan.toggle_signal is not None:
            # From now, not from the target's start: record says where to send it before
            # it builds and starts its sources, and a signal then must not kill it.  Python
            # runs the handler in the main thread between bytecodes: no race with poll().
            self._previous_handler = signal.signal(plan.toggle_signal, lambda _s, _f: self.toggle())

    def env(self) -> dict[str, str]:
        return self.control.env()

    def target_started(self, pid: int, started_ns: int) -> None:
        self.pid = pid
        if self.plan.delay_s is not None:
            self._open_at = started_ns + round(self.plan.delay_s * 1e9)
            if self.plan.duration_s is not None:
                self._close_at = self._open_at + max(1_000_000, round(self.plan.duration_s * 1e9))
            self.poll(time.monotonic_ns())

    def next_change_s(self, now_ns: int) -> float | None:
        """Seconds until the next timed opening or closing (None: none pending)."""
        due = [t for t in (self._open_at, self._close_at) if t is not None]
        return max(0.0, (min(due) - now_ns) / 1e9) if due else None

    def poll(self, now_ns: int) -> None:
        """Open or close the timed window when its time has come."""
        if self._open_at is not None and now_ns >= self._open_at:
            self._open_at = None
            self._open(DELAY, now_ns)
        if self._open_at is None and self._close_at is not None and now_ns >= self._close_at:
            self._close_at = None
            self._close("duration", now_ns)

    def toggle(self) -> None:
        """The toggle signal arrived: open the window if closed, else close it."""
        self.toggles += 1
        now = time.monotonic_ns()
        if self._open_since is None:
            self._open(SIGNAL, now)
        else:
            self._close(SIGNAL, now)

    def finish(self) -> None:
        """The target ended: a window still open ends with it."""
        if self._open_since is not None:
            self._close("exit", time.monotonic_ns())
        self._open_at = self._close_at = None

    def _open(self, reason: str, now_ns: int) -> None:
        self._open_since, self._open_reason = now_ns, reason
        self.control.set_tree_open(True)

    def _close(self, end_reason: str, now_ns: int) -> None:
        self.control.set_tree_open(False)
        assert self._open_since is not None
        self.windows.append(
            model.CaptureWindow(self.pid, self._open_since, now_ns, self._open_reason, end_reason)
        )
        self._open_since = None

    def close(self) -> None:
        if self.plan.toggle_signal is not None:
            signal.signal(self.plan.toggle_signal, self._previous_handler)
        self.control.close()
        for p in self._directory.iterdir():
            p.unlink()
        self._directory.rmdir()


def window_summary(windows: int, ignored: int, plan: CapturePlan) -> str:
    """The summary line of a windowed recording: how many windows, or why none."""
    mode = plan.mode
    if windows == 0:
        if mode == PROFILER_API:
            why = "no process called cudaProfilerStart (or cuProfilerStart)"
        elif mode == SIGNAL:
            why = f"no {plan.toggle_signal.name if plan.toggle_signal else 'toggle signal'} came"
        elif mode.startswith(NVTX_PREFIX):
            why = f"no NVTX range named {mode.removeprefix(NVTX_PREFIX)} began"
        elif mode == TORCH_PROFILER:
            why = "no process ran an active torch.profiler trace (its schedule's active steps)"
        else:
            why = "the target ended before --delay"
        return f"capture windows: none ({why}): nothing was recorded"
    extra = f", {ignored} openings after the last one ignored" if ignored else ""
    return f"capture windows ({mode}): {windows}{extra}; nothing outside them recorded"
