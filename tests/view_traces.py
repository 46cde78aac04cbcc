"""A two-process run in record's form for the UI tests (tests/test_view_opening.py): what a
user's first `view` of a training job shows, known by construction.

Each process (`rank 0`, `rank 1`, one GPU each) spends SETUP_NS in imports and model
set-up (CPU samples, one weights copy to its GPU early on, so the active span starts
there), then runs STEPS `ProfilerStep#N` steps whose every GPU gap is the dataset's
`__getitem__` on the CPU (data loading).  Each GPU has counter tracks over the whole run
(first used before its stream, as a sampler that starts with the process writes them);
each process has BLAS-like threads with no slice and no sample, and one with samples only.
The steps are ~2% of the run: opened on the whole run they are a sliver at its end."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from collector import model
from collector.model import Frame, Stack
from tests.slice_batches import batched

T0 = 20_000_000_000
SETUP_NS = 5_000_000_000
STEPS = 12
STEP_GPU_NS = 4_000_000  # four 1 ms kernels per step
STEP_HOST_NS = 9_000_000  # the dataset's work between steps
PERIOD = 1_000_000  # 1 kHz sampling
STREAM = 7
EMPTY_THREADS = 6  # per process, named like OpenBLAS's
COUNTERS = ("SM active %", "tensor active %", "DRAM bandwidth %", "power W")
USER = "/work/app/train.py"
DATA = "/work/app/data.py"
PYBIN = "/usr/bin/python3.11"


def _py(func: str, line: int, path: str = USER) -> Frame:
    return Frame(f"{func} ({path.rsplit('/', 1)[-1]}:{line})", path, line)


MAIN = (Frame("_start", PYBIN), Frame("_PyEval_EvalFrameDefault", PYBIN), _py("<module>", 90))
IMPORT_STACK = Stack((*MAIN, _py("<module>", 3), Frame("PyImport_ImportModule", PYBIN)))
LAUNCH_STACK = Stack((*MAIN, _py("train", 60), _py("forward", 44), Frame("cudaLaunchKernel", "")))
COPY_STACK = Stack((*MAIN, _py("build", 12), Frame("cudaMemcpyAsync", "libcudart")))
DATA_STACK = Stack(
    (*MAIN, _py("train", 60), _py("Dataset.__getitem__", 41, DATA), Frame("png_read_row", ""))
)
WORKER_STACK = Stack((Frame("start_thread", "libc"), _py("_pin_memory_loop", 50, DATA)))
DATA_LOCATION = "Dataset.__getitem__ (data.py:41)"


@dataclass(frozen=True)
class Run:
    path: Path
    first_step_ts: int  # rank 0's first step starts here
    focus_ts: int  # the second step's start (the earlier rank's): what findings cover from
    end_ts: int  # the end of the last GPU op
    processes: tuple[str, ...]


def write_two_rank_run(path: Path) -> Run:
    from exporters.perfetto.writer import TraceWriter

    events: list[model.Event] = []
    ranks = [_rank(rank, events) for rank in (0, 1)]
    events.sort(key=_event_ts)
    with TraceWriter(
        path,
        command_line=["xpu-perf", "record", "--", "torchrun", "train.py"],
        sample_frequency_hz=1000,
    ) as writer:
        writer.producer("cupti").write_all(batched(events))
    return Run(
        path,
        T0 + SETUP_NS,
        min(r[1] for r in ranks),
        max(r[2] for r in ranks),
        tuple(r[0] for r in ranks),
    )


def _event_ts(event: model.Event) -> int:
    if isinstance(event, model.GpuCounterSeries):
        return int(event.ts[0])
    return int(getattr(event, "ts", 0))


def _rank(rank: int, events: list[model.Event]) -> tuple[str, int, int]:
    """Rank `rank`'s events into `events`: its name, its second step's start, the end of
    its last GPU op."""
    pid = 1000 + rank
    info = model.ranked_process(pid, "python3", ("python3", "train.py"), rank, rank, 2)
    events += [info, model.ThreadInfo(pid, pid, "python3"), model.GpuDevice(rank, "H100")]
    for k in range(EMPTY_THREADS):
        events.append(model.ThreadInfo(pid, pid + 10 + k, "python3"))
    worker = pid + 50
    events.append(model.ThreadInfo(pid, worker, "pt_pin_memory"))
    corr = 0
    t0 = T0 + rank * 300_000  # the ranks start a little apart

    def launch(ts: int, gpu_ts: int, dur: int, name: str, cat: str, stack: Stack) -> None:
        nonlocal corr
        corr += 1
        flow = model.flow_id(pid, corr)
        api = "cudaMemcpyAsync" if cat == model.CAT_MEMCPY else "cudaLaunchKernel"
        args = {"correlation_id": corr}
        events.append(
            model.CpuSlice(
                pid, pid, ts, 5_000, api, model.CAT_CUDA_API, args, flow_ids=(flow,),
                launch_stack=stack,
            )
        )  # fmt: skip
        events.append(
            model.GpuOp(
                rank, STREAM, gpu_ts, dur, name, cat, args, correlation_id=corr,
                terminating_flow_ids=(flow,),
            )
        )  # fmt: skip

    def samples(start: int, stop: int, stack: Stack, tid: int = pid) -> None:
        t = start + PERIOD
        while t <= stop:
            events.append(model.CpuSample(pid, tid, t, stack))
            t += PERIOD

    # Set-up: imports, the weights copied to the GPU 0.5 s in.
    samples(t0, t0 + SETUP_NS, IMPORT_STACK)
    copy_ts = t0 + 500_000_000
    launch(copy_ts, copy_ts + 30_000, 2_000_000, "Memcpy HtoD", model.CAT_MEMCPY, COPY_STACK)
    samples(t0, t0 + 200_000_000, WORKER_STACK, worker)
    t = t0 + SETUP_NS
    second_step = end = 0
    for step in range(STEPS):
        gpu_t = t + 30_000
        for k, name in enumerate(("gemm_fwd", "relu_fwd", "gemm_bwd", "sgd_update")):
            launch(t + k * 20_000, gpu_t, 1_000_000, name, model.CAT_KERNEL, LAUNCH_STACK)
            gpu_t += 1_000_000
        step_end = t + 80_000 + STEP_HOST_NS
        events.append(
            model.CpuSlice(pid, pid, t, step_end - t, f"ProfilerStep#{step}", "user_annotation")
        )
        if step == 1:
            second_step = t
        samples(t + 80_000, step_end, DATA_STACK)
        end = gpu_t
        t = step_end
    for c, name in enumerate(COUNTERS):
        ts = list(range(t0 + 100_000_000, t + 100_000_000, 100_000_000))
        values = [float((i * 7 + c * 13) % 100) for i in range(len(ts))]
        events.append(model.GpuCounterSeries(rank, name, "%", ts, values))
    return info.name, second_step, end
