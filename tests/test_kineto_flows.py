"""The reference converter's flow links (tests/kineto_reference_flows.py): both ends of a flow
carry its id whatever order Kineto wrote them in, within the window; farther apart is
counted, never half-written; what the linker holds does not grow with the input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from collector import model
from collector.sources import kineto

from .kineto_reference import convert_events
from .kineto_reference_flows import API_CALL, DEVICE_OP, FlowLinker, Slot

PID, TID = 10, 11


def api(ts: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": PID,
            "tid": TID, "ts": ts, "dur": 1, "args": {"correlation": corr}}  # fmt: skip


def kernel(ts: float, corr: int) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": f"k{corr}", "pid": 0, "tid": 7, "ts": ts,
            "dur": 2, "args": {"correlation": corr, "device": 0, "stream": 7}}  # fmt: skip


def cpu_op(ts: float, name: str = "aten::mm") -> dict[str, Any]:
    return {"ph": "X", "cat": "cpu_op", "name": name, "pid": PID, "tid": TID, "ts": ts,
            "dur": 1}  # fmt: skip


def flow(ph: str, cat: str, ident: int, ts: float, pid: int = PID, tid: int = TID) -> dict:
    return {"ph": ph, "cat": cat, "id": ident, "pid": pid, "tid": tid, "ts": ts, "name": cat}


def convert(
    tmp_path: Path, events: list[dict[str, Any]], window: int = 1 << 16
) -> tuple[list[model.Event], kineto.ConvertStats]:
    src = tmp_path / "trace.json"
    src.write_text(json.dumps({"traceEvents": events}))
    stats = kineto.ConvertStats()
    out = list(convert_events(src, kineto.read_head(src), stats, window=window))
    return out, stats


def slices(out: list[model.Event]) -> dict[str, model.CpuSlice | model.GpuOp]:
    return {e.name: e for e in out if isinstance(e, (model.CpuSlice, model.GpuOp))}


def test_api_call_and_ops_linked_in_either_order(tmp_path: Path) -> None:
    # A launch before its kernel, one after (MTIA writes device ops first), and a graph
    # launch whose three kernels come before and after it.
    events = [api(10, 1), kernel(12, 1), kernel(22, 2), api(20, 2)]
    events += [kernel(31, 3), api(30, 3), kernel(32, 3), kernel(33, 3)]
    events[5]["name"] = "cudaGraphLaunch"
    out, stats = convert(tmp_path, events)
    apis = [e for e in out if isinstance(e, model.CpuSlice)]
    ops = [e for e in out if isinstance(e, model.GpuOp)]
    assert [len(a.flow_ids) for a in apis] == [1, 1, 3]
    starts = {fid: a for a in apis for fid in a.flow_ids}
    for op in ops:
        (fid,) = op.terminating_flow_ids
        assert starts.pop(fid).args["correlation_id"] == op.correlation_id
    assert not starts
    assert stats.flows == 5 and stats.gpu_ops_with_api == 5 and not stats.skipped
    # Written in input order, whatever waited for its links.
    assert [e.ts for e in out if isinstance(e, (model.CpuSlice, model.GpuOp))] == [
        round(e["ts"] * 1000) for e in events
    ]


def test_flow_pair_is_the_link_of_its_correlation(tmp_path: Path) -> None:
    events = [api(10, 5), flow("s", "ac2g", 5, 10), kernel(12, 5)]
    events += [flow("f", "ac2g", 5, 12, pid=0, tid=7)]
    out, stats = convert(tmp_path, events)
    by_name = slices(out)
    assert len(by_name["cudaLaunchKernel"].flow_ids) == 1
    assert by_name["k5"].terminating_flow_ids == by_name["cudaLaunchKernel"].flow_ids
    assert stats.flows == 0 and stats.flow_pairs == {"ac2g": 1}


def test_flow_end_before_its_start_and_before_its_event(tmp_path: Path) -> None:
    # ROCm's fwdbwd `f` comes before the `s`; a flow event may come before its event.
    events = [flow("f", "fwdbwd", 9, 50), cpu_op(50, "bwd"), cpu_op(10, "fwd")]
    events += [flow("s", "fwdbwd", 9, 10)]
    out, stats = convert(tmp_path, events)
    by_name = slices(out)
    assert (
        by_name["fwd"].flow_ids and by_name["fwd"].flow_ids == by_name["bwd"].terminating_flow_ids
    )
    assert stats.fwdbwd_flows == 1 and not stats.skipped


def test_links_farther_than_the_window_are_counted(tmp_path: Path) -> None:
    gap = [cpu_op(100 + i, f"op{i}") for i in range(20)]
    events = [cpu_op(10, "fwd"), flow("s", "fwdbwd", 1, 10), *gap, cpu_op(200, "bwd")]
    events += [flow("f", "fwdbwd", 1, 200), api(300, 4), *gap, kernel(400, 4)]
    out, stats = convert(tmp_path, events, window=8)
    assert not any(e.flow_ids or e.terminating_flow_ids for e in slices(out).values())
    assert stats.skipped == {
        "'fwdbwd' flow starts without an end within 8 events": 1,
        "'fwdbwd' flow ends without a start within 8 events": 1,
    }
    assert stats.gpu_ops_without_api == 1 and stats.flows == 0
    # Within a window that holds both, the same input is linked.
    out, stats = convert(tmp_path, events, window=64)
    assert stats.fwdbwd_flows == 1 and stats.flows == 1 and not stats.skipped


def test_what_the_linker_holds_does_not_grow_with_the_input() -> None:
    linker = FlowLinker(window=256)
    held = []
    for i in range(20_000):
        key = (1, 1, i)
        # Flow starts that never end, ends that never start, ends at no event, API calls
        # and ops whose other end never comes, repeated correlation ids.
        linker.push(Slot(None, API_CALL if i % 3 else DEVICE_OP, i % 5000), key)
        linker.flow("s", "fwdbwd", i, key)
        linker.flow("f", "ac2g", -i, key)
        linker.flow("f", "x", i, (2, 2, i))
        if i % 1000 == 999:
            held.append(linker.held())
    assert max(held) <= 6 * 256, held
    linker.drain()
    within = " within 256 events"
    assert linker.skipped["'fwdbwd' flow starts without an end" + within] >= 19_000
    assert linker.skipped["'x' flow ends without a start" + within] >= 19_000
    assert sum(n for k, n in linker.skipped.items() if "'fwdbwd' flow starts" in k) == 20_000
