"""Per-rank inputs for the merge and ranks-report tests and the merge memory benchmark:
PyTorch profiler (Kineto) JSON of one rank of a data-parallel job, converted by the real
`xpu-perf convert`.

Every step of every rank has the same GPU layout (us from the step's base time), so the
numbers a report must give are known by hand:

    compute A [0, 100)     NCCL 1 [50, 150)    -> 50 us of NCCL 1 exposed
    compute B [200, 300)   NCCL 2 [320, 400)   -> all 80 us exposed
    compute C [400, 500 + slow) NCCL 3 [420, 460) -> hidden

Rank r's compute C runs `slow_us` longer (the slow rank), and its ProfilerStep slice spans
[-30, 500 + slow).  The NCCL kernels end at the same true time on every rank; `skew_us`
shifts all of one rank's timestamps, as a node whose clock is off; `nccl_late_us` starts
one rank's NCCL kernels later (under 40 us), ending with the others': the straggler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from collector import model
from collector.model import Frame, Stack
from tests.slice_batches import batched

NCCL_NAMES = (
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    "ncclKernel_AllGather_RING_LL_Sum_int8_t(ncclWorkElem)",
    "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
)
COMPUTE_NAME = "void gemm_kernel<float>(float const*, float*)"
STEP_US = 1000  # steps start STEP_US apart
T0_US = 1_000_000  # small enough that float us keep exact ns
COMPUTE_STREAM = 7
NCCL_STREAM = 20
PID = 4242  # the same pid on every rank: the merge must keep them apart

# Per step: (name, start, end) in us from the step's base; C's end grows by slow_us.
_COMPUTE = ((0, 100), (200, 300), (400, 500))
_NCCL = ((50, 150), (320, 400), (420, 460))
COMM_US = sum(e - s for s, e in _NCCL)  # 220
EXPOSED_US = 50 + 80  # 130


@dataclass(frozen=True)
class RankSpec:
    rank: int
    world_size: int = 2
    host: str = "node0"
    steps: int = 4
    slow_us: int = 0
    skew_us: float = 0.0
    pid: int = PID
    marked_steps: bool = True  # a ProfilerStep slice per step
    nccl_late_us: int = 0  # its NCCL kernels start this much later, ending with the others'

    def compute_us(self) -> int:
        return sum(e - s for s, e in _COMPUTE) + self.slow_us

    def busy_us(self) -> int:
        # [0,150) U [200,300) U [320, 500 + slow)
        return 150 + 100 + (180 + self.slow_us)

    def step_us(self) -> int:
        return 530 + self.slow_us


def step_kernels(spec: RankSpec) -> list[tuple[str, int, int, int]]:
    """One step's kernels of a rank, (name, start us, end us, stream) in start order: the
    compute kernels (the third one longer on a slow rank) and the NCCL ones."""
    kernels = [
        (COMPUTE_NAME, s, e + (spec.slow_us if i == 2 else 0), COMPUTE_STREAM)
        for i, (s, e) in enumerate(_COMPUTE)
    ] + [
        (name, s + spec.nccl_late_us, e, NCCL_STREAM)
        for name, (s, e) in zip(NCCL_NAMES, _NCCL, strict=True)
    ]
    return sorted(kernels, key=lambda k: k[1])


def _event(**fields: object) -> dict:
    return dict(fields)


def rank_kineto(path: Path, spec: RankSpec) -> Path:
    events: list[dict] = [
        _event(ph="M", name="process_name", pid=spec.pid, tid=0, args={"name": "python"}),
        _event(ph="M", name="thread_name", pid=spec.pid, tid=spec.pid, args={"name": "main"}),
    ]
    correlation = 0
    for step in range(spec.steps):
        base = T0_US + step * STEP_US + spec.skew_us
        if spec.marked_steps:
            events.append(
                _event(
                    ph="X",
                    cat="user_annotation",
                    name=f"ProfilerStep#{step}",
                    pid=spec.pid,
                    tid=spec.pid,
                    ts=base - 30,
                    dur=530 + spec.slow_us,
                )
            )
        for name, start, end, stream in step_kernels(spec):
            correlation += 1
            launch = base + start - 25
            events.append(
                _event(
                    ph="X",
                    cat="cuda_runtime",
                    name="cudaLaunchKernel",
                    pid=spec.pid,
                    tid=spec.pid,
                    ts=launch,
                    dur=5,
                    args={"correlation": correlation},
                )
            )
            events.append(
                _event(
                    ph="X",
                    cat="kernel",
                    name=name,
                    pid=0,
                    tid=stream,
                    ts=base + start,
                    dur=end - start,
                    args={"device": 0, "stream": stream, "correlation": correlation},
                )
            )
    doc = {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200", "totalGlobalMem": 1 << 37}],
        "distributedInfo": {"backend": "nccl", "rank": spec.rank, "world_size": spec.world_size},
        "hostname": spec.host,
        "traceEvents": events,
    }
    path.write_text(json.dumps(doc))
    return path


def kernels_per_rank(spec: RankSpec) -> int:
    return spec.steps * (len(_COMPUTE) + len(_NCCL))


# -- the same job as `record` writes it ------------------------------------------------
MONO_T0_NS = 50_000_000_000  # the monotonic clock of the recorded traces at their first step
SAMPLE_STACK = Stack((Frame("main", "/usr/bin/python3"), Frame("train_step", "/app/train.so")))
LAUNCH_STACK = Stack((Frame("train_step", "/app/train.so"), Frame("cudaLaunchKernel", "libcudart")))


def recorded_rank_trace(
    path: Path,
    spec: RankSpec,
    snapshot: dict[int, int],
    window_steps: tuple[int, int] | None = None,
) -> Path:
    """A trace in `record`'s form, by the real writer: CLOCK_MONOTONIC timestamps with a
    BOOTTIME/MONOTONIC/REALTIME snapshot, a ranked process, API calls with launch stacks and
    flows to their kernels (the job's layout), one CPU sample per step, the host in the
    metadata and, with `window_steps` (first, last), one capture window around those steps.
    `spec.skew_us` shifts the events as in rank_kineto."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from collector.recording.trace import write_windows
    from exporters.perfetto.writer import TraceWriter

    pid, tid = spec.pid, spec.pid
    events: list[model.Event] = [
        model.ranked_process(pid, "python", ("python", "train.py"), spec.rank, 0, spec.world_size),
        model.ThreadInfo(pid, tid, "python"),
        model.GpuDevice(0, "NVIDIA H200"),
    ]
    correlation = 0
    for step in range(spec.steps):
        base = MONO_T0_NS + step * STEP_US * 1000 + round(spec.skew_us * 1000)
        events.append(
            model.CpuSlice(pid, tid, base - 30_000, (530 + spec.slow_us) * 1000, f"step {step}")
        )
        events.append(model.CpuSample(pid, tid, base - 29_000, SAMPLE_STACK))
        for name, start, end, stream in step_kernels(spec):
            correlation += 1
            flow = model.flow_id(pid, correlation)
            launch = base + (start - 25) * 1000
            events.append(
                model.CpuSlice(
                    pid,
                    tid,
                    launch,
                    5000,
                    "cudaLaunchKernel",
                    model.CAT_CUDA_API,
                    {"correlation_id": correlation},
                    flow_ids=(flow,),
                    launch_stack=LAUNCH_STACK,
                )
            )
            events.append(
                model.GpuOp(
                    0,
                    stream,
                    base + start * 1000,
                    (end - start) * 1000,
                    name,
                    model.CAT_KERNEL,
                    {"correlation_id": correlation},
                    correlation_id=correlation,
                    terminating_flow_ids=(flow,),
                )
            )
    with TraceWriter(
        path,
        command_line=["xpu-perf", "record", "--", "torchrun", "train.py"],
        clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
        clock_snapshot=snapshot,
        sample_frequency_hz=99,
    ) as writer:
        writer.producer("cupti").write_all(batched(events))
        writer.set_metadata("host", spec.host)
        if window_steps is not None:
            first, last = window_steps
            skew = round(spec.skew_us * 1000)
            start = MONO_T0_NS + first * STEP_US * 1000 - 40_000 + skew
            end = MONO_T0_NS + last * STEP_US * 1000 + 600_000 + skew
            write_windows(writer, [model.CaptureWindow(pid, start, end, "cudaProfilerApi", "exit")])
    return path
