"""Synthetic traces whose every idle gap is a known chain along the launching thread: a
blocking call that emptied the queue, then code (timer samples), blocked time (waits,
issue 37's contract: 'wait' slices with the stack at entry), nothing at all, then the next
launch.  The inputs of tests/test_analysis_chain.py.

A step: 4 kernels of 1 ms queued at once, then the gap's chain, then the next step's first
launch (its kernel starts 30 us after the call: launch latency)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from collector import model
from collector.model import Frame, Stack
from tests.slice_batches import batched

from .analysis_traces import HZ, LOOP, PERIOD, PID, STREAM, T0, TID, _py

SITE = "/usr/lib/python3/site-packages"


@dataclass(frozen=True)
class Part:
    """One stretch of the launching thread in a gap."""

    kind: str  # 'block' (a blocking CUDA call), 'samples', 'wait', 'nothing'
    dur: int
    stack: Stack | None = None
    name: str = ""  # the CUDA call ('block'), the blocked call ('wait')
    # 'block': a device-to-host copy of this many bytes made just before the call (its op
    # runs 10 us after the step's kernels): `.cpu()` / `.item()`
    copy_bytes: int = 0


@dataclass
class Chain:
    steps: int
    gap_ns: dict[str, int]  # ns per class over every gap of the trace


def kernel_stack(*frames: Frame) -> Stack:
    return Stack((*LOOP, *frames, Frame("cudaLaunchKernel", "libcudart")))


def write(
    path: Path,
    chain: list[Part],
    classes: list[str],
    steps: int = 10,
    launch_stacks: list[Stack] | None = None,
    extra: list[model.Event] | None = None,
    on_wait: Callable[[int, int], list[model.Event]] | None = None,
) -> Chain:
    """`chain`: the parts of each gap after the GPU ran dry (the first, a 'block', may
    begin before: it is the call in flight then); `classes`: the class of each part's time
    in the gap (the block's from the GPU's end); `on_wait(start, end)`: what others do
    while the thread waits (their events)."""
    from exporters.perfetto.writer import TraceWriter

    events: list[model.Event] = [
        model.ProcessInfo(PID, "python3", ("python3", "train.py")),
        model.ThreadInfo(PID, TID, "python3"),
        model.GpuDevice(0, "NVIDIA H100"),
        *(extra or []),
    ]
    corr = [0]
    stacks = launch_stacks or [kernel_stack(_py("forward", 44))]

    def launch(ts: int, kernel_ts: int, name: str, stack: Stack) -> None:
        corr[0] += 1
        flow = model.flow_id(PID, corr[0])
        events.append(
            model.CpuSlice(
                PID,
                TID,
                ts,
                5_000,
                "cudaLaunchKernel",
                model.CAT_CUDA_API,
                {"correlation_id": corr[0]},
                flow_ids=(flow,),
                launch_stack=stack,
            )
        )
        events.append(
            model.GpuOp(
                0,
                STREAM,
                kernel_ts,
                1_000_000,
                name,
                model.CAT_KERNEL,
                {"correlation_id": corr[0]},
                correlation_id=corr[0],
                terminating_flow_ids=(flow,),
            )
        )

    gap_ns: dict[str, int] = {}
    t = T0
    for step in range(steps):
        gpu_t = t + 30_000
        for k in range(4):
            launch(t + k * 20_000, gpu_t, f"k{k}", stacks[k % len(stacks)])
            gpu_t += 1_000_000
        gpu_end = gpu_t
        copying = [p for p in chain if p.kind == "block" and p.copy_bytes]
        if copying:
            corr[0] += 1
            flow = model.flow_id(PID, corr[0])
            events.append(
                model.CpuSlice(
                    PID,
                    TID,
                    t + 4 * 20_000 - 10_000,
                    5_000,
                    "cudaMemcpyAsync",
                    model.CAT_CUDA_API,
                    {"correlation_id": corr[0]},
                    flow_ids=(flow,),
                    launch_stack=copying[0].stack,
                )
            )
            events.append(
                model.GpuOp(
                    0,
                    STREAM,
                    gpu_end,
                    10_000,
                    "Memcpy DtoH (Device -> Pageable)",
                    model.CAT_MEMCPY,
                    {
                        "correlation_id": corr[0],
                        "copy_kind": "DtoH",
                        "bytes": copying[0].copy_bytes,
                    },
                    correlation_id=corr[0],
                    terminating_flow_ids=(flow,),
                )
            )
            gpu_end += 10_000
        cur = gpu_end
        for i, part in enumerate(chain):
            start = cur
            if part.kind == "block":
                # In flight since the last launch; returns part.dur after the GPU ran dry.
                start = t + 4 * 20_000
                events.append(
                    model.CpuSlice(
                        PID,
                        TID,
                        start,
                        cur + part.dur - start,
                        part.name,
                        model.CAT_CUDA_API,
                        {"correlation_id": 10_000_000 + step},
                        launch_stack=part.stack,
                    )
                )
            elif part.kind == "samples":
                s = cur + PERIOD
                while s <= cur + part.dur:
                    events.append(model.CpuSample(PID, TID, s, part.stack))
                    s += PERIOD
            elif part.kind == "wait":
                events.append(
                    model.CpuSlice(
                        PID,
                        TID,
                        cur,
                        part.dur,
                        f"waiting in {part.name}",
                        "wait",
                        {"call": part.name},
                    )
                )
                if part.stack is not None:
                    # The stack at the call's entry, as the recorder writes it (xpu_wait).
                    events.append(model.WaitStack(PID, TID, cur, part.stack))
                if on_wait is not None:
                    events.extend(on_wait(cur, cur + part.dur))
            cur += part.dur
            if step < steps - 1:
                gap_ns[classes[i]] = gap_ns.get(classes[i], 0) + part.dur
        if step < steps - 1:
            gap_ns["launch"] = gap_ns.get("launch", 0) + 30_000
        t = cur
    with TraceWriter(
        path,
        command_line=["xpu-perf", "record", "--", "python3", "train.py"],
        sample_frequency_hz=HZ,
    ) as writer:
        writer.producer("cupti").write_all(
            batched(sorted(events, key=lambda e: int(getattr(e, "ts", 0))))
        )
    return Chain(steps, gap_ns)
