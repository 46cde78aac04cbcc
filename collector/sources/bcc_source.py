"""What every bcc-based source shares: compiling a program from bpf/, following the target's
process tree, draining the BPF ring buffer on a background thread, and loss counters.

Lifecycle (the same for the CPU sampler and the launch uprobes, so `record` composes them):

    source.start()                                # compile + attach; follows our forks
    proc = subprocess.Popen(cmd)                  # the target is tracked from fork on
    source.target_started(proc.pid)               # stop following the recorder's forks
    ...                                           # run until exit / Ctrl-C / --duration
    source.stop()                                 # drain, detach
    for event in source.events(): writer.write(event)
    source.stats()                                # counters for metadata and the summary

Raw records are kept as addresses during the run and symbolized in `events()`, after the
target is done, so the recorder spends no CPU on symbols while the target runs.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from collector.model import Event
from collector.sources.bcc_api import BpfProgram
from collector.sources.bcc_process_tree import ProcessRegistry, ProcessTree, descendants

BPF_DIR = Path(__file__).resolve().parents[2] / "bpf"

# Event kinds and counter slots: keep in sync with bpf/process_tree.h.
EV_SAMPLE, EV_FORK, EV_EXEC, EV_EXIT, EV_LAUNCH = 1, 2, 3, 4, 5
COUNTER_NAMES = (
    "events",
    "lost_ringbuf_full",
    "user_stack_errors",
    "kernel_stack_errors",
    "untracked_forks",
    "user_stacks_truncated",
)
MAX_FRAMES = 127

_TASK_EVENT = struct.Struct("<IIIIQ16s")


class BccUnavailable(Exception):
    """bcc cannot be imported or cannot load programs here; the message says why."""


def load_bpf_module() -> ModuleType:
    try:
        import bcc  # Debian's python3-bpfcc, linked into the venv by scripts/setup_bcc.sh
    except ImportError as exc:
        raise BccUnavailable(f"cannot import bcc ({exc}); run: sudo scripts/setup_bcc.sh") from exc
    return bcc


def program_text(name: str) -> str:
    """bpf/<name> with bpf/process_tree.h pasted in: bcc generates tracepoint argument
    structs only for TRACEPOINT_PROBEs in the main text, not in included headers."""
    header = (BPF_DIR / "process_tree.h").read_text().replace("#pragma once", "")
    return (BPF_DIR / name).read_text().replace('#include "process_tree.h"', header)


def comm_str(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


def stack_words(data: bytes, offset: int, nbytes: int) -> array[int]:
    """The `nbytes` of u64 addresses at `offset`, leaf first (empty on a stack error)."""
    words = array("Q")
    if nbytes > 0:
        words.frombytes(data[offset : offset + nbytes - nbytes % 8])
    return words


class BccSource:
    """Base of the bcc sources: subclasses name their program and attach their probes."""

    name = "ebpf"  # metadata prefix: counters are written as `<name>.<counter>`
    program = ""  # file in bpf/
    ringbuf_pages = 1024  # power of two
    cflags: tuple[str, ...] = ()  # extra -D switches of the program
    poll_ms = 100  # the drain thread's ring-buffer wait: periodic() runs about this often

    def __init__(self) -> None:
        self.bpf: BpfProgram | None = None  # from start() (or follow()) to stop()
        self.registry = ProcessRegistry()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._counters: dict[str, int] = {}
        self.decode_errors = 0

    # --- lifecycle ---------------------------------------------------------------------

    def target_env(self) -> dict[str, str]:
        """Environment the target needs (none: eBPF observes from outside)."""
        return {}

    def start(self, tree: ProcessTree | None = None) -> None:
        """Compile and attach; follow `tree` (default: whatever this process spawns next)."""
        if tree is None:
            tree = ProcessTree.spawned_by_self()
        self.bpf = self.compile()
        self.follow(tree)

    def compile(self) -> BpfProgram:
        """The program compiled and loaded (bcc's BPF object).  Its tracepoints that follow
        forks and exits are attached here already, following nothing until `follow`."""
        bcc = load_bpf_module()
        try:
            return bcc.BPF(
                text=program_text(self.program),
                cflags=[
                    f"-DXP_RINGBUF_PAGES={self.ringbuf_pages}",
                    "-Wno-macro-redefined",
                    *self.cflags,
                ],
            )
        except Exception as exc:  # bcc raises bare Exception on compile errors
            raise BccUnavailable(f"bcc could not compile bpf/{self.program}: {exc}") from exc

    @property
    def loaded(self) -> BpfProgram:
        """The program, while it is loaded (a RuntimeError before start() and after stop())."""
        if self.bpf is None:
            raise RuntimeError(f"bpf/{self.program} is not loaded")
        return self.bpf

    def follow(self, tree: ProcessTree) -> None:
        """Follow `tree` with the compiled program, attach its probes, start draining.  The
        fork tracepoint is on before the live descendants are listed: a process forked
        before the listing is in it, one forked after has a followed parent."""
        tracked = self.loaded["tracked"]
        for pid in descendants(tree.pids) if tree.pids else ():
            tracked[ctypes.c_uint32(pid)] = ctypes.c_uint8(1)
        if tree.spawner is not None:
            self.loaded["spawner"][ctypes.c_int(0)] = ctypes.c_uint32(tree.spawner)
        self.attach()
        self.loaded["events"].open_ring_buffer(self._on_record)
        self._thread = threading.Thread(target=self._drain, name=f"bcc-{self.program}", daemon=True)
        self._thread.start()

    def target_started(self, pid: int) -> None:
        """The target is running as `pid`: follow it, stop following the recorder's forks."""
        self.loaded["tracked"][ctypes.c_uint32(pid)] = ctypes.c_uint8(1)
        self.loaded["spawner"][ctypes.c_int(0)] = ctypes.c_uint32(0)

    def stop(self) -> None:
        if self.bpf is None:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.detach()
        self.bpf.ring_buffer_consume()  # what arrived between the last poll and detaching
        counters = self.bpf["counters"]
        self._counters = {
            name: int(counters.sum(ctypes.c_int(i)).value) for i, name in enumerate(COUNTER_NAMES)
        }
        self._counters.update(self._program_run_time())
        bpf, self.bpf = self.bpf, None
        self.release(bpf)

    def release(self, bpf: BpfProgram) -> None:
        """Detach and close everything of the program (after the final drain)."""
        bpf.cleanup()

    def _program_run_time(self) -> dict[str, int]:
        """Time the kernel spent in this source's BPF programs, from their fdinfo.  Zero
        unless the kernel.bpf_stats_enabled sysctl is on (the overhead benchmark sets it)."""
        run_ns = runs = 0
        for func in self.loaded.funcs.values():
            try:
                info = Path(f"/proc/self/fdinfo/{func.fd}").read_text()
            except OSError:
                continue
            for line in info.splitlines():
                key, _, value = line.partition(":")
                if key == "run_time_ns":
                    run_ns += int(value)
                elif key == "run_cnt":
                    runs += int(value)
        return {"bpf_run_ns": run_ns, "bpf_runs": runs}

    def _drain(self) -> None:
        while not self._stop.is_set():
            self.loaded.ring_buffer_poll(self.poll_ms)
            self.periodic()

    # --- subclass hooks ----------------------------------------------------------------

    def attach(self) -> None:
        raise NotImplementedError

    def detach(self) -> None:
        """Stop new records before the final drain (probes are also removed by cleanup)."""

    def periodic(self) -> None:
        """Called on the drain thread about every 100 ms."""

    def on_data_record(self, kind: int, data: bytes) -> None:
        raise NotImplementedError

    # --- ring buffer -------------------------------------------------------------------

    def _on_record(self, _ctx: object, data: int, size: int) -> int:
        # bcc's ring buffer callback: `data` the record's address (a void * as an int).
        raw = ctypes.string_at(data, size)
        try:
            kind = struct.unpack_from("<I", raw)[0]
            if kind in (EV_FORK, EV_EXEC, EV_EXIT):
                _, pid, tid, ppid, _ts, comm = _TASK_EVENT.unpack_from(raw)
                if kind == EV_FORK:
                    self.registry.on_fork(pid, ppid)
                elif kind == EV_EXEC:
                    self.registry.on_exec(pid, comm_str(comm))
                self.on_task_event(kind, pid, tid)
            else:
                self.on_data_record(kind, raw)
        except Exception:  # never let one bad record stop the drain thread
            self.decode_errors += 1
        return 0

    def on_task_event(self, kind: int, pid: int, tid: int) -> None:
        """Fork/exec/exit of a followed task (after the registry saw it)."""

    def events(self) -> Iterator[Event]:
        """The recorded events, symbolized (call after stop())."""
        raise NotImplementedError

    def stats(self) -> dict[str, int]:
        """Counters: what was recorded and every way something was lost."""
        raise NotImplementedError

    # --- results -----------------------------------------------------------------------

    def kernel_counters(self) -> dict[str, int]:
        return dict(self._counters)
