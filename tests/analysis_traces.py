"""Synthetic traces in record's form with exactly known GPU idle gaps, their causes, steps
and the CPU samples inside them: the inputs of tests/test_analysis.py.

Each scenario is one program shape (a step loop on one thread, one GPU stream) whose every
gap is known by construction; `Expected` says what the analysis must find."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from collector import model
from collector.model import Frame, Stack
from tests.slice_batches import batched

PID = TID = 4242
T0 = 10_000_000_000
HZ = 1000
PERIOD = 1_000_000  # ns between timer samples at HZ
STREAM = 7

USER = "/work/app/train.py"
TORCH_DATA = "/usr/lib/python3/dist-packages/torch/utils/data/dataloader.py"
PYBIN = "/usr/bin/python3.11"


def _py(func: str, line: int, path: str = USER) -> Frame:
    return Frame(f"{func} ({path.rsplit('/', 1)[-1]}:{line})", path, line)


MAIN = (Frame("_start", PYBIN), Frame("_PyEval_EvalFrameDefault", PYBIN), _py("<module>", 90))
LOOP = (*MAIN, _py("train", 60))
SYNC_STACK = Stack((*LOOP, _py("log_loss", 31), Frame("cudaStreamSynchronize", "libcudart")))
LAUNCH_STACK = Stack((*LOOP, _py("forward", 44), Frame("cudaLaunchKernel", "libcudart")))
DATA_STACK = Stack(
    (
        *LOOP,
        _py("__next__", 630, TORCH_DATA),
        _py("_next_data", 674, TORCH_DATA),
        _py("SlowDecode.__getitem__", 21),
        Frame("png_read_row", "/usr/lib/libpng.so"),
    )
)
HOST_STACK = Stack((*LOOP, _py("augment", 77), Frame("memmove", "/lib/libc.so.6")))
GPU_BOUND_STACK = Stack((*LOOP, _py("forward", 44)))


@dataclass
class Expected:
    steps: int
    gap_class: str | None  # the class of each step's gap; None: no gap worth a finding
    location: str | None  # the Python line the finding must name
    finding: str | None  # the top finding's code
    idle_per_step_ns: int = 0
    gap_ns: dict[str, int] = field(default_factory=dict)  # ns per class over the trace
    # The classes whose time the top finding claims (default: gap_class's).
    finding_classes: tuple[str, ...] = ()

    def claimed(self) -> tuple[str, ...]:
        return self.finding_classes or ((self.gap_class,) if self.gap_class else ())


def write(path: Path, scenario: str, steps: int = 12) -> Expected:
    """Write the trace of `scenario` to `path` and say what is in it."""
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    from exporters.perfetto.writer import TraceWriter

    events: list[model.Event] = [
        model.ProcessInfo(PID, "python3", ("python3", "train.py")),
        model.ThreadInfo(PID, TID, "python3"),
        model.GpuDevice(0, "NVIDIA H100"),
    ]
    state = {"corr": 0}

    def launch(
        ts: int,
        dur: int,
        kernel_ts: int,
        kernel_dur: int,
        name: str,
        stack: Stack = LAUNCH_STACK,
        api: str = "cudaLaunchKernel",
        category: str = model.CAT_KERNEL,
    ) -> None:
        state["corr"] += 1
        corr = state["corr"]
        flow = model.flow_id(PID, corr)
        events.append(
            model.CpuSlice(
                PID,
                TID,
                ts,
                dur,
                api,
                model.CAT_CUDA_API,
                {"correlation_id": corr},
                flow_ids=(flow,),
                launch_stack=stack,
            )
        )
        events.append(
            model.GpuOp(
                0,
                STREAM,
                kernel_ts,
                kernel_dur,
                name,
                category,
                {"correlation_id": corr},
                correlation_id=corr,
                terminating_flow_ids=(flow,),
            )
        )

    def samples(start: int, end: int, stack: Stack) -> None:
        t = start + PERIOD
        while t <= end:
            events.append(model.CpuSample(PID, TID, t, stack))
            t += PERIOD

    gap_ns: dict[str, int] = {}
    t = T0
    kernels = ("gemm_fwd", "relu_fwd", "gemm_bwd", "sgd_update")
    if scenario == "launch_bound":
        # A step of tiny kernels (an embedding, 10 layers forward, a loss, 10 layers
        # backward, an update), each launched 10 us after the last: the GPU runs 2 us and
        # waits 8 us for the next launch (a host part under the launch threshold).
        sequence = (
            ["embedding_fwd"]
            + ["gemm_fwd", "relu_fwd"] * 10
            + ["loss"]
            + ["relu_bwd", "gemm_bwd"] * 10
            + ["sgd_update"]
        )
        for _ in range(steps):
            for name in sequence:
                launch(t, 4_000, t + 6_000, 2_000, name)
                t += 10_000
        gap_ns["launch"] = (steps * len(sequence) - 1) * 8_000
        return _finish(
            path,
            events,
            pb,
            TraceWriter,
            Expected(
                steps,
                "launch",
                "forward (train.py:44)",
                "LAUNCH_BOUND",
                len(sequence) * 8_000,
                gap_ns,
            ),
        )
    for step in range(steps):
        # The step's kernels: launched 20 us apart, queued, run back to back for 4 ms.
        gpu_t = t + 30_000
        for k, name in enumerate(kernels):
            launch(t + k * 20_000, 5_000, gpu_t, 1_000_000, name, GPU_BOUND_STACK)
            gpu_t += 1_000_000
        gpu_end = gpu_t
        if scenario == "gpu_bound":
            # The next step is launched ahead of the GPU: its first kernel, queued, starts
            # 1 us after this step's last one ends.
            t = gpu_end + 1_000 - 30_000
            continue
        host_start = t + 4 * 20_000
        if scenario == "sync":
            # loss.item(): a sync that returns 10 us after the GPU ran dry, then 2 ms of
            # preparation in Python before the next step's first launch: the GPU idles
            # 10 us inside the sync, then 2 ms while augment runs.
            sync_end = gpu_end + 10_000
            events.append(
                model.CpuSlice(
                    PID,
                    TID,
                    host_start,
                    sync_end - host_start,
                    "cudaStreamSynchronize",
                    model.CAT_CUDA_API,
                    {"correlation_id": 10_000_000 + step},
                    launch_stack=SYNC_STACK,
                )
            )
            next_t = sync_end + 2_000_000
            samples(sync_end, next_t, HOST_STACK)
            cls = "sync"
            if step < steps - 1:
                gap_ns["host_compute"] = gap_ns.get("host_compute", 0) + next_t - sync_end
                gap_ns["sync"] = gap_ns.get("sync", 0) + sync_end - gpu_end
        else:
            stack = DATA_STACK if scenario == "data" else HOST_STACK
            # 9 ms of input pipeline / preprocessing on the CPU while the GPU runs 4 ms.
            next_t = host_start + 9_000_000
            samples(host_start, next_t, stack)
            cls = "data_loading" if scenario == "data" else "host_compute"
        if step < steps - 1:
            # The next step's first kernel starts 30 us after its call: launch latency.
            if cls != "sync":
                gap_ns[cls] = gap_ns.get(cls, 0) + next_t - gpu_end
            gap_ns["launch"] = gap_ns.get("launch", 0) + 30_000
        t = next_t
    if scenario == "gpu_bound":
        gap_ns["launch"] = (steps - 1) * 1_000
        return _finish(
            path, events, pb, TraceWriter, Expected(steps, None, None, None, 1_000, gap_ns)
        )
    where = {
        "sync": "log_loss (train.py:31)",
        "data": "SlowDecode.__getitem__ (train.py:21)",
        "host": "augment (train.py:77)",
    }[scenario]
    code = {"sync": "HOST_SYNC", "data": "INPUT_PIPELINE", "host": "PYTHON_BETWEEN_LAUNCHES"}
    per_step = sum(gap_ns.values()) // (steps - 1)
    # The sync finding claims the time in the sync and the work that followed it.
    claimed = ("sync", "host_compute") if scenario == "sync" else ()
    return _finish(
        path,
        events,
        pb,
        TraceWriter,
        Expected(steps, cls, where, code[scenario], per_step, gap_ns, claimed),
    )


def _finish(
    path: Path, events: list[model.Event], pb: object, writer_cls: type, expected: Expected
) -> Expected:
    with writer_cls(
        path,
        command_line=["xpu-perf", "record", "--", "python3", "train.py"],
        sample_frequency_hz=HZ,
    ) as writer:
        writer.producer("cupti").write_all(batched(sorted(events, key=_event_ts)))
    return expected


def _event_ts(event: model.Event) -> int:
    return int(getattr(event, "ts", 0))
