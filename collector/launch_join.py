"""Composite source: GPU recording whose launch stacks come from eBPF, not from inside the target.

`record --launch-stacks ebpf` runs the injection library with its in-process unwinder off; the
library still calls `xpu_perf_launch_marker(correlation_id, api_id)` at every launch, and a
uprobe on that marker takes the user stack from the kernel.  After the run each uprobe hit is
joined to the `cuda_api` slice with the same (pid, correlation id), so the trace has the same
shape as with in-process stacks: one launch stack per launch, on its API slice.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Protocol

from collector import model
from collector.sources.bcc_uprobes import BccLaunchUprobes, with_launch_stacks


class GpuRecording(Protocol):
    """What this needs of the GPU source (record's CuptiRecording)."""

    @property
    def name(self) -> str: ...

    def target_env(self) -> Mapping[str, str]: ...
    def start(self) -> None: ...
    def target_started(self, pid: int) -> None: ...
    def stop(self) -> None: ...
    def events(self) -> Iterable[model.Event]: ...
    def stats(self) -> Mapping[str, int]: ...
    def windows(self) -> Sequence[model.CaptureWindow]: ...
    def recorded_bytes(self) -> int: ...
    def notes(self) -> Mapping[str, str]: ...
    def summary_lines(self) -> Sequence[str]: ...


@dataclasses.dataclass
class EbpfLaunchStacks:
    """A RecordSource: `gpu`'s events with `uprobes`' marker stacks joined in."""

    gpu: GpuRecording
    uprobes: BccLaunchUprobes
    _counts: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.gpu.name

    def target_env(self) -> Mapping[str, str]:
        return {**self.uprobes.target_env(), **self.gpu.target_env()}

    def start(self) -> None:
        # Probes first: the marker must be attached before the target's first launch.
        self.uprobes.start()
        self.gpu.start()

    def target_started(self, pid: int) -> None:
        self.uprobes.target_started(pid)
        self.gpu.target_started(pid)

    def stop(self) -> None:
        self.gpu.stop()
        self.uprobes.stop()

    def events(self) -> Iterator[model.Event]:
        counts: dict[str, int] = {}
        with_user_frame = joined_launches = 0
        for ev in with_launch_stacks(self.gpu.events(), self.uprobes.hits(), counts):
            if isinstance(ev, model.SliceBatch):
                n, user = _launches_with_stack(ev.cpu)
                joined_launches += n
                with_user_frame += user
            yield ev
        self._counts = {
            **counts,
            "joined_launches": joined_launches,
            "with_user_frame": with_user_frame,
        }

    def windows(self) -> Sequence[model.CaptureWindow]:
        return self.gpu.windows()

    def recorded_bytes(self) -> int:
        return self.gpu.recorded_bytes()

    def notes(self) -> Mapping[str, str]:
        """The GPU source's text (the program's own profiler, another tool's injection)."""
        return self.gpu.notes()

    def summary_lines(self) -> Sequence[str]:
        return self.gpu.summary_lines()

    def stats(self) -> dict[str, int]:
        """The GPU source's counters, with its launch-stack counters taken from the join
        (the library's own unwinder was off) and the uprobes' losses as `ebpf_launch_*`."""
        out = dict(self.gpu.stats())
        launches = out.get("launches", 0)
        joined = self._counts.get("joined_launches", 0)
        out["launches_without_stack"] = launches - joined
        out["launches_with_user_frame"] = self._counts.get("with_user_frame", 0)
        out["launch_stacks_unmatched"] = self._counts.get("launch_stacks_unmatched", 0)
        out.update({f"ebpf_launch_{k}": v for k, v in self.uprobes.stats().items()})
        return out


def _launches_with_stack(cpu: model.SliceColumns) -> tuple[int, int]:
    """(launch rows with a stack, those whose stack has a frame of the user's)."""
    from collector.sources.cupti_api import has_user_frame, is_launch

    if cpu.stack is None:
        return 0, 0
    launch = [is_launch(name) for name in cpu.names]
    user = [has_user_frame(stack) for stack in cpu.stacks]
    with_stack = with_user = 0
    for name, stack in zip(cpu.name, cpu.stack, strict=True):
        if stack != model.NONE and launch[name]:
            with_stack += 1
            with_user += user[stack]
    return with_stack, with_user
