"""Running the target: the sources' environment, the target started as the right user, and
its end — its own exit, or Ctrl-C / --duration / --max-size passed on as SIGINT, then
SIGTERM, then SIGKILL — while record opens and closes the tree's capture windows."""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import subprocess
import time
from collections.abc import Callable, Sequence

from collector.errors import Terminated, UserError
from collector.recording.credentials import target_credentials
from collector.recording.size_limit import SizeLimit
from collector.recording.source import RecordSource, SizedSource, WindowFollower
from collector.recording.windows import SignalHandler, TreeWindows

# After Ctrl-C the target gets SIGINT, then SIGTERM, then SIGKILL, this far apart.
STOP_GRACE_S = 2.0
# How long one wait for the target's exit lasts between two looks at the stop conditions.
POLL_S = 0.05


class Interrupt:
    """record's SIGINT/SIGTERM/SIGHUP handler, for the whole recording.

    While the target runs, a signal is noted and the wait loop passes it on to the target
    (record itself must live on to write the trace).  A signal the target did not get (it
    came before the target started, as it exited, or after) asks record itself to stop:
    noted as `stop_signal`, it never interrupts anything by itself (the sources' stop must
    detach and flush); the writing of the trace calls `check()` between events and stops
    there, so the recording ends as a complete trace or as kept streams."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signal: int | None = None  # the last one noted while the target ran
        self.forwarded = 0  # signals passed on to the target
        self.target_running = False
        self.stop_signal: int | None = None  # one that asks record to stop
        self._previous: dict[int, SignalHandler] = {}

    def __call__(self, signum: int, _frame: object) -> None:
        if self.target_running:
            self.signal = signum
            return
        self.stop_signal = signum

    def install(self) -> Interrupt:
        self._previous = {s: signal.signal(s, self) for s in self.SIGNALS}
        return self

    def restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def target_ended(self) -> None:
        """The target is gone: a signal noted that never reached it is record's to obey."""
        self.target_running = False
        if self.signal is not None and not self.forwarded and self.stop_signal is None:
            self.stop_signal = self.signal

    def check(self) -> None:
        """Raise (KeyboardInterrupt, Terminated) if record was asked to stop: called where
        stopping is clean (between two events of the trace being written), never from the
        handler itself, which could land in the middle of anything."""
        if self.stop_signal is not None:
            raise stop_error(self.stop_signal)


def stop_error(signum: int) -> BaseException:
    """What a signal raises: KeyboardInterrupt for SIGINT, Terminated for the others."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def target_environment(sources: Sequence[RecordSource]) -> dict[str, str]:
    """record's environment with every source's; LD_PRELOAD is the sources' libraries (once
    each: the GPU source preloads the CPU sampler's library too, for its process hooks) ahead
    of the user's own."""
    env = dict(os.environ)
    preload: list[str] = []
    for source in sources:
        for key, value in source.target_env().items():
            if key == "LD_PRELOAD":
                preload += [p for p in value.split() if p not in preload]
            else:
                env[key] = value
    if preload:
        users = [p for p in os.environ.get("LD_PRELOAD", "").split() if p not in preload]
        env["LD_PRELOAD"] = " ".join(preload + users)
    return env


def run_target(
    cmd: Sequence[str],
    sources: Sequence[RecordSource],
    duration: float | None = None,
    size_limit: SizeLimit | None = None,
    tree: TreeWindows | None = None,
    interrupt: Interrupt | None = None,
) -> int:
    """Start the sources, run `cmd` with their environment, stop them; returns the target's
    exit status (128+N when killed by signal N).  Ctrl-C (or the end of `duration`, or the
    recorded data reaching `size_limit`, which notes when) is passed on to the target as
    SIGINT, then SIGTERM, then SIGKILL.  `tree`: the windows record opens for the whole tree
    (--delay on record's clock; the toggle signal of --capture-range signal).  `interrupt`:
    record's handler, installed by the caller for the whole recording (else one installed
    here while the target runs); a signal before the target starts raises, one the target
    did not get is left in `interrupt.stop_signal`."""
    env = target_environment(sources)
    if tree is not None:
        env.update(tree.env())
        for source in sources:
            if isinstance(source, WindowFollower):
                source.follow_windows(tree.control)
    own = interrupt is None
    if interrupt is None:
        interrupt = Interrupt().install()
    try:
        for source in sources:
            source.start()
    except BaseException:
        if own:
            interrupt.restore()
        raise
    try:
        if interrupt.stop_signal is not None:  # asked to stop before the target ran
            raise stop_error(interrupt.stop_signal)
        interrupt.target_running = True
        try:
            creds = target_credentials()
            proc = subprocess.Popen(list(cmd), env=env, preexec_fn=dies_with_parent(), **creds)
        except OSError as exc:
            raise UserError(f"cannot run {cmd[0]}: {exc.strerror}") from None
        started_ns = time.monotonic_ns()
        if size_limit is not None:
            size_limit.started_ns = started_ns
        if tree is not None:
            tree.target_started(proc.pid, started_ns)
        for source in sources:
            source.target_started(proc.pid)
        _wait(
            proc,
            [s for s in sources if isinstance(s, SizedSource)],
            interrupt,
            duration,
            size_limit,
            tree,
        )
        interrupt.target_ended()
        if tree is not None:
            tree.finish()
        code = proc.returncode
        return 128 - code if code < 0 else code
    finally:
        interrupt.target_ended()
        if own:
            interrupt.restore()
        for source in sources:
            source.stop()


PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def dies_with_parent() -> Callable[[], None] | None:
    """A preexec_fn that has the kernel SIGKILL the target when record dies, even by
    SIGKILL (no handler of record runs then): a recording's target is never left running
    on its own.  Runs in the child after Popen switched to the target's user (a change of
    user would clear the setting).  None where prctl is not there (not Linux)."""
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before the fork
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def set_parent_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # record died before the line above: no signal comes
            os.kill(os.getpid(), signal.SIGKILL)

    return set_parent_death_signal


def _wait(
    proc: subprocess.Popen[bytes],
    sized: Sequence[SizedSource],
    interrupt: Interrupt,
    duration: float | None,
    size_limit: SizeLimit | None,
    tree: TreeWindows | None,
) -> None:
    """Until the target exits: measure the recorded data, pass a stop on (escalating every
    STOP_GRACE_S), and open and close the timed windows on time."""
    exited = exit_watch(proc.pid)
    try:
        _wait_loop(proc, sized, interrupt, duration, size_limit, tree, exited)
    finally:
        if exited is not None:
            os.close(exited)


def exit_watch(pid: int) -> int | None:
    """A pidfd of `pid`, readable once it exits: the wait wakes at the exit itself (Popen's
    timed wait polls, up to 50 ms late); None where the kernel has none (before 5.3)."""
    try:
        return os.pidfd_open(pid)
    except (OSError, AttributeError):
        return None


def _wait_loop(
    proc: subprocess.Popen[bytes],
    sized: Sequence[SizedSource],
    interrupt: Interrupt,
    duration: float | None,
    size_limit: SizeLimit | None,
    tree: TreeWindows | None,
    exited: int | None,
) -> None:
    escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
    last_sent: float | None = None
    deadline = time.monotonic() + duration if duration else None
    while proc.poll() is None:
        if size_limit is not None:
            size_limit.poll(sized)
        due = last_sent is None or time.monotonic() - last_sent >= STOP_GRACE_S
        stopping = (
            interrupt.signal is not None
            or (deadline is not None and time.monotonic() >= deadline)
            or (size_limit is not None and size_limit.reached)
        )
        if stopping and escalation and due:
            proc.send_signal(escalation.pop(0))
            interrupt.forwarded += 1
            last_sent = time.monotonic()
        wait_s = POLL_S
        if tree is not None:
            tree.poll(time.monotonic_ns())
            # The timed window opens and closes on time, not at the next 50 ms poll.
            due_s = tree.next_change_s(time.monotonic_ns())
            wait_s = min(wait_s, due_s) if due_s is not None else wait_s
        if exited is not None:
            with contextlib.suppress(InterruptedError):
                select.select([exited], [], [], max(0.0, wait_s))
            continue
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=wait_s)
