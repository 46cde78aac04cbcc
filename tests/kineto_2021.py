"""A synthetic trace in Kineto's 2021 layout (PyTorch 1.8-1.9, the TensorBoard plugin's
resnet50 samples), written from that layout's rules, not copied from a trace:
- every tid is text: a CPU thread's number ("5504"), a GPU stream ("stream 7");
- categories `Operator`, `Runtime`, `Kernel`, `Memcpy`, `Memset`;
- an API call and the device op it launched share `correlation` (and `external id`: the
  operator's `External id`);
- the launch link is a flow pair `"cat": "async", "name": "launch"` with the correlation as
  its id: `s` at the API call (its tid a number), `f` at the op (`"tid": "stream N"`,
  `"bp": "e"`), each written right after its event.
`Launches` says what a converter must find: which ops have a flow pair, which only the
correlation args, which have no API call in the trace."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Launches:
    with_flow_pair: int = 0
    correlation_only: int = 0
    without_api_call: int = 0
    corr_of_ops: list[int] = field(default_factory=list)


def write(path: Path, steps: int = 40, pid: int = 5504, tid: int = 5504) -> Launches:
    events: list[dict[str, Any]] = []
    launches = Launches()
    ts = 1_618_854_005_555_000
    corr = 1000
    ext = 1
    for step in range(steps):
        events.append(_x("Operator", f"ProfilerStep#{step}", pid, str(tid), ts, 900,
                         {"Device": pid, "External id": ext, "Trace name": "PyTorch Profiler",
                          "Trace iteration": 0}))  # fmt: skip
        ext += 1
        for op in range(6):
            t = ts + 10 + op * 140
            op_dims = {"Device": pid, "External id": ext, "Input dims": [[8, 3], [3]]}
            events.append(_x("Operator", "aten::conv2d", pid, str(tid), t, 100, op_dims))
            corr += 1
            kind = (step * 6 + op) % 10
            launch_ts = t + 20
            gpu_ts = launch_ts + 500
            name, cat, cbid = (
                ("cudaMemcpyAsync", "Memcpy", 41)
                if kind == 3
                else ("cudaLaunchKernel", "Kernel", 211)
            )
            if kind != 9:  # the API call is in the trace
                events.append(_x("Runtime", name, pid, str(tid), launch_ts, 8,
                                 {"cbid": cbid, "correlation": corr, "external id": ext,
                                  "external ts": t}))  # fmt: skip
                if kind != 5:  # this one's flow pair was lost: the correlation links it
                    events.append({"ph": "s", "id": corr, "pid": pid, "tid": tid, "ts": launch_ts,
                                   "cat": "async", "name": "launch"})  # fmt: skip
            op_args: dict[str, Any] = {"device": 0, "context": 1, "stream": 7,
                                       "correlation": corr, "external id": ext}  # fmt: skip
            if cat == "Kernel":
                op_args |= {"registers per thread": 32, "shared memory": 0, "grid": [80, 1, 1],
                            "block": [256, 1, 1]}  # fmt: skip
                op_name = f"void at::native::kernel_{op}<float>(float*)"
            else:
                op_args |= {"bytes": 4096, "memory bandwidth (GB/s)": 3.2}
                op_name = "Memcpy HtoD (Pageable -> Device)"
            events.append(_x(cat, op_name, 0, "stream 7", gpu_ts, 30, op_args))
            if kind == 9:
                launches.without_api_call += 1
            elif kind == 5:
                launches.correlation_only += 1
            else:
                events.append({"ph": "f", "id": corr, "pid": 0, "tid": "stream 7", "ts": gpu_ts,
                               "cat": "async", "name": "launch", "bp": "e"})  # fmt: skip
                launches.with_flow_pair += 1
            launches.corr_of_ops.append(corr)
            ext += 1
        ts += 1000
    events += [
        {"name": "process_name", "ph": "M", "ts": ts, "pid": pid, "tid": 0,
         "args": {"name": "python"}},
        {"name": "process_labels", "ph": "M", "ts": ts, "pid": pid, "tid": 0,
         "args": {"labels": "CPU"}},
        {"name": "thread_name", "ph": "M", "ts": ts, "pid": pid, "tid": str(tid),
         "args": {"name": f"thread {tid} (python)"}},
        {"name": "process_name", "ph": "M", "ts": ts, "pid": 0, "tid": 0,
         "args": {"name": "GPU 0"}},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": ts},
    ]  # fmt: skip
    doc = {"schemaVersion": 1, "traceEvents": events}
    path.write_text(json.dumps(doc, indent=1))
    return launches


def _x(
    cat: str, name: str, pid: int, tid: str, ts: int, dur: int, args: dict[str, Any]
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur,
            "args": args}  # fmt: skip
