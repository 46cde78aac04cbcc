"""The writer's slice encoder (batch_writer.py: a SliceBatch in columns), read back
through trace_processor against what the batch's rows say by themselves.

Every batch is read back and compared with a model computed from its rows
(`SliceBatch.slices()`): each slice with its args (correlation id, launch stack, a GPU
op's device and stream), its thread or stream, its lane (lanes.LaneSet.place over the
track's slices in start order, the longer of two first: what the encoder's shortcuts
for disjoint and nested slices must agree with), its depth and parent within the lane;
the flows that go forward in time; and a launch-stack sample per API call with a stack.
"""

from __future__ import annotations

import random
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import model
from collector.sources.cupti import CuptiSource
from exporters.perfetto import batch_writer, launch_stacks
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.lanes import LaneSet
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import as_batch

REPO = Path(__file__).resolve().parent.parent
PID = 77
NAMES = ["cudaLaunchKernel", "cudaMemcpyAsync", "range", "kern_a", "kern_b", "Memcpy HtoD"]
CATEGORIES = [model.CAT_CUDA_API, "nvtx", model.CAT_KERNEL, model.CAT_MEMCPY]
ARG_SETS: list[model.Args] = [
    {},
    {"domain": "app"},
    {"grid_x": 128, "block_x": 256, "registers_per_thread": 32},
    {"grid_x": 64, "block_x": 256, "registers_per_thread": 40, "graph_id": 3},
    {"bytes": 4096, "copy_kind": "HtoD"},
]
STACKS = [
    model.Stack((model.Frame("main", "/bin/app", 0x10), model.Frame("launch", "/lib/x.so", 0x20))),
    model.Stack((model.Frame("main", "/bin/app", 0x10), model.Frame("[py] step", "[python]"))),
]


def _columns(rows: list[dict[str, int]], gpu: bool) -> model.SliceColumns:
    def col(key: str) -> list[int]:
        return [r[key] for r in rows]

    return model.SliceColumns(
        ts=col("ts"),
        dur=col("dur"),
        track=col("track"),
        device=col("device") if gpu else None,
        name=col("name"),
        names=NAMES,
        category=col("category"),
        categories=CATEGORIES,
        args=col("args"),
        arg_sets=ARG_SETS,
        correlation_id=col("corr"),
        stack=None if gpu else col("stack"),
        stacks=() if gpu else STACKS,
    )


def make_batch(
    rng: random.Random, n_cpu: int, n_gpu: int, threads: int, streams: int, t0: int = 10_000
) -> model.SliceBatch:
    """Random slices: overlapping and nested ones, empty ones, equal starts; flows from
    CPU rows (several from one, some ending before they start) to GPU rows."""
    cpu = []
    for i in range(n_cpu):
        ts = t0 + rng.randrange(0, 40 * max(n_cpu, 1))
        cpu.append(
            {
                "ts": ts,
                "dur": rng.choice([0, rng.randrange(1, 30), rng.randrange(1, 400)]),
                "track": PID + rng.randrange(threads),
                "name": rng.randrange(3),
                "category": rng.randrange(2),
                "args": rng.randrange(2),
                "corr": i + 1 if rng.random() < 0.8 else model.NONE,
                "stack": rng.choice([model.NONE, 0, 1]),
            }
        )
    gpu = []
    for i in range(n_gpu):
        gpu.append(
            {
                "ts": t0 + rng.randrange(0, 40 * max(n_gpu, 1)),
                "dur": rng.choice([0, rng.randrange(1, 60), rng.randrange(1, 300)]),
                "track": 7 + rng.randrange(streams),
                "device": rng.randrange(2),
                "name": 3 + rng.randrange(3),
                "category": 2 + rng.randrange(2),
                "args": 2 + rng.randrange(3),
                "corr": 1000 + i if rng.random() < 0.9 else model.NONE,
            }
        )
    flow_from, flow_to = [], []
    if cpu:
        for i in range(n_gpu):
            if rng.random() < 0.8:
                flow_from.append(rng.randrange(len(cpu)))
                flow_to.append(i)
    return model.SliceBatch(PID, _columns(cpu, False), _columns(gpu, True), flow_from, flow_to)


def _write(path: Path, batches: list[model.SliceBatch]) -> dict[str, int]:
    with TraceWriter(path) as w:
        p = w.producer("test")
        p.write(model.ProcessInfo(PID, "app"))
        p.write(model.GpuDevice(0, "GPU zero"))
        p.write(model.GpuDevice(1, "GPU one"))
        p.write_all(batches)
    return dict(w.counts)


def _expected(batches: list[model.SliceBatch]) -> dict[str, object]:
    """The fingerprint (see _fingerprint) the batches' rows make, lanes by LaneSet."""
    lane_sets: dict[tuple[int, ...], LaneSet] = {}
    lanes: dict[tuple[int, ...], list[tuple[int, int, int, tuple]]] = {}  # placed order
    flows = []
    samples = []
    extra_lanes = 0
    for batch in batches:
        slices = list(batch.slices())
        sigs = []
        for ev in slices:
            args = dict(ev.args)
            if isinstance(ev, model.GpuOp):
                args.update(device=ev.device, stream=ev.stream)
                if ev.correlation_id is not None:
                    args["correlation_id"] = ev.correlation_id
            elif ev.launch_stack is not None:
                args[launch_stacks.ARG_KEY] = launch_stacks.stack_text(ev.launch_stack)
                samples.append(
                    (ev.ts, ev.tid, ";".join(f.function for f in ev.launch_stack.frames))
                )
            text = ",".join(f"debug.{k}={v}" for k, v in sorted(args.items()))
            sigs.append((ev.ts, ev.dur, ev.name, ev.category, text))
        starts: dict[int, list[int]] = {}
        for i, ev in enumerate(slices):
            for fid in ev.flow_ids:
                starts.setdefault(fid, []).append(i)
        for i, ev in enumerate(slices):
            for fid in ev.terminating_flow_ids:
                for src in starts.get(fid, ()):
                    if ev.ts >= slices[src].ts:  # trace_processor drops one going back
                        flows.append((sigs[src], sigs[i]))

        def track(ev: model.CpuSlice | model.GpuOp) -> tuple[int, ...]:
            if isinstance(ev, model.GpuOp):
                return (1, ev.device, ev.stream)
            return (0, ev.pid, ev.tid)

        order = sorted(
            range(len(slices)), key=lambda i: (track(slices[i]), sigs[i][0], -sigs[i][1], i)
        )
        for i in order:
            ev = slices[i]
            key = track(ev)
            lane_set = lane_sets.setdefault(key, LaneSet())
            before = lane_set.count
            lane = lane_set.place(ev.ts, ev.dur)
            extra_lanes += lane_set.count - max(before, 1)
            tid = ev.tid if isinstance(ev, model.CpuSlice) else -1
            lanes.setdefault((*key, lane), []).append((ev.ts, ev.dur, tid, sigs[i]))
    rows = []
    for members in lanes.values():
        # Depth and parent within the lane: its slices nest; an END comes before a BEGIN
        # of the same time, so a slice that ends where another starts is not its parent.
        open_slices: list[tuple[int, tuple]] = []  # (end, sig)
        for ts, dur, tid, sig in sorted(members, key=lambda m: (m[0], -m[1])):
            while open_slices and open_slices[-1][0] <= ts:
                open_slices.pop()
            parent = open_slices[-1][1][2] if open_slices else ""
            rows.append((*sig, len(open_slices), tid, parent))
            if dur > 0:
                open_slices.append((ts + dur, sig))
    return {
        "slices": sorted(rows),
        "lanes": sorted(
            (tuple(sorted(m[3] for m in v)) for v in lanes.values()), key=lambda v: (len(v), v)
        ),
        "flows": sorted(flows),
        "samples": sorted(samples),
        "extra_lanes": extra_lanes,
    }


def _fingerprint(path: Path) -> dict[str, object]:
    """What the trace reads back as, free of ids that depend on write order."""
    with open_trace(path) as t:
        slices = t.query(
            "select s.id, s.ts, s.dur, s.name, s.category, s.depth, s.track_id, "
            "  coalesce(th.tid, -1) as tid, coalesce(tr.name, '') as track_name, "
            "  (select group_concat(a.key || '=' || coalesce(a.int_value, a.string_value), ',')"
            "     from (select * from args a where a.arg_set_id = s.arg_set_id "
            "           order by a.key) a) as args, "
            "  (select p.name from slice p where p.id = s.parent_id) as parent "
            "from slice s join track tr on tr.id = s.track_id "
            "left join thread_track tt on tt.id = s.track_id "
            "left join thread th using (utid) "
            "where s.category != 'xpu_perf_metadata'"
        )
        sig = {
            r["id"]: (r["ts"], r["dur"], r["name"], r["category"], r["args"] or "") for r in slices
        }
        lanes: dict[int, list] = {}
        for r in slices:
            lanes.setdefault(r["track_id"], []).append(sig[r["id"]])
        flows = sorted(
            (sig[r["slice_out"]], sig[r["slice_in"]])
            for r in t.query("select slice_out, slice_in from flow")
        )
        callsites = {
            r["id"]: (r["parent_id"], r["name"])
            for r in t.query(
                "select c.id, c.parent_id, f.name from stack_profile_callsite c "
                "join stack_profile_frame f on f.id = c.frame_id"
            )
        }

        def frames(callsite: int | None) -> str:
            names = []
            while callsite is not None:
                callsite, name = callsites[callsite]
                names.append(name)
            return ";".join(reversed(names))

        samples = sorted(
            (r["ts"], r["tid"], frames(r["callsite_id"]))
            for r in t.query(
                # Launch stacks: StreamingProfile samples, the ns rest in process_priority
                # (exporters/perfetto/launch_stacks.py).
                "select p.ts + p.process_priority as ts, th.tid, p.callsite_id "
                "from cpu_profile_stack_sample p join thread th using (utid)"
            )
        )
        errors = t.query(
            "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
        )
    return {
        "slices": sorted((*sig[r["id"]], r["depth"], r["tid"], r["parent"] or "") for r in slices),
        # A GPU op's track: its stream's (the lane tracks of a stream carry its name).
        "stream_tracks": [
            (r["track_name"], re.search(r"debug\.stream=(\d+)", r["args"] or ""))
            for r in slices
            if r["tid"] == -1
        ],
        "lanes": sorted((tuple(sorted(v)) for v in lanes.values()), key=lambda v: (len(v), v)),
        "flows": flows,
        "samples": samples,
        "errors": errors,
    }


def _assert_lanes(got: dict[str, object], want: dict[str, object]) -> None:
    """Every lane of the model is on one track of the trace (trace_processor merges a
    stream's or thread's lane tracks whose slices do not overlap: a track may hold
    several lanes), and on every track the slices nest."""
    tracks = [Counter(lane) for lane in got["lanes"]]  # type: ignore[attr-defined]
    for lane in want["lanes"]:  # type: ignore[attr-defined]
        assert any(Counter(lane) <= track for track in tracks), lane
    assert sum(map(len, got["lanes"])) == sum(map(len, want["lanes"]))  # type: ignore[arg-type]
    for track in got["lanes"]:  # type: ignore[attr-defined]
        ends: list[int] = []
        for ts, dur, *_ in sorted(track, key=lambda sig: (sig[0], -sig[1])):
            while ends and ends[-1] <= ts:
                ends.pop()
            end = ts + max(dur, 0)
            assert not ends or end <= ends[-1], f"{track}: a slice overlaps another partly"
            if dur > 0:
                ends.append(end)


def _compare(tmp_path: Path, batches: list[model.SliceBatch]) -> dict[str, object]:
    path = tmp_path / "batches.perfetto-trace"
    counts = _write(path, batches)
    got, want = _fingerprint(path), _expected(batches)
    assert got["errors"] == []
    for name, stream in got["stream_tracks"]:  # type: ignore[attr-defined]
        assert stream is not None and name == f"Stream {stream[1]}"
    for key in ("slices", "flows", "samples"):
        assert got[key] == want[key], key
    _assert_lanes(got, want)
    n_slices = sum(b.cpu.rows + b.gpu.rows for b in batches)
    assert len(got["slices"]) == n_slices  # type: ignore[arg-type]
    assert counts["slices"] == n_slices
    assert counts["launch_stacks"] == len(want["samples"])  # type: ignore[arg-type]
    assert counts["extra_lanes"] == want["extra_lanes"]
    return got


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 10_000),
    n_cpu=st.integers(0, 40),
    n_gpu=st.integers(0, 40),
    threads=st.integers(1, 3),
    streams=st.integers(1, 3),
)
def test_random_batches_read_back_like_objects(
    tmp_path: Path, seed: int, n_cpu: int, n_gpu: int, threads: int, streams: int
) -> None:
    batch = make_batch(random.Random(seed), n_cpu, n_gpu, threads, streams)
    _compare(tmp_path, [batch])


def test_large_batches_blocks_chunks_and_late_rows(tmp_path: Path, monkeypatch) -> None:
    """Blocks and chunks of several kinds in one run: small blocks, a second process going
    back in time on the same streams (late rows: absolute timestamps), and more tracks
    than a sequence has clocks of its own."""
    monkeypatch.setattr(batch_writer, "BLOCK_PACKETS", 64)
    rng = random.Random(3)
    first = make_batch(rng, 1500, 2500, threads=40, streams=30, t0=50_000)
    second = make_batch(rng, 300, 400, threads=40, streams=30, t0=10_000)
    got = _compare(tmp_path, [first, second])
    # Every flow that goes forward in time is there (trace_processor drops a flow whose
    # end comes before its start, in both paths alike; CUPTI's never do).
    forward = sum(
        b.gpu.ts[dst] >= b.cpu.ts[src]
        for b in (first, second)
        for src, dst in zip(b.flow_from, b.flow_to, strict=True)
    )
    assert forward > 1000
    assert len(got["flows"]) == forward  # type: ignore[arg-type]


def test_disjoint_launches_one_lane_each(tmp_path: Path) -> None:
    """The common case (API calls one after another, kernels one after another): every
    slice on its track's own lane, every kernel with its flow, every launch its stack."""
    n = 3000
    cpu = [
        {
            "ts": 1_000 + 10 * i,
            "dur": 4,
            "track": PID,
            "name": 0,
            "category": 0,
            "args": 0,
            "corr": i + 1,
            "stack": i % 2,
        }
        for i in range(n)
    ]
    gpu = [
        {
            "ts": 1_006 + 10 * i,
            "dur": 9,
            "track": 7,
            "device": 0,
            "name": 3,
            "category": 2,
            "args": 2,
            "corr": i + 1,
        }
        for i in range(n)
    ]
    batch = model.SliceBatch(
        PID, _columns(cpu, False), _columns(gpu, True), list(range(n)), list(range(n))
    )
    got = _compare(tmp_path, [batch])
    assert len(got["lanes"]) == 2  # type: ignore[arg-type]
    assert len(got["flows"]) == n  # type: ignore[arg-type]
    assert len(got["samples"]) == n  # type: ignore[arg-type]


@pytest.mark.parametrize("workload", ["launch_bound", "cuda_graph", "multi_gpu"])
def test_real_h100_streams_read_back_as_their_rows(tmp_path: Path, workload: str) -> None:
    """Streams that `record --keep-streams` kept on the lent H100 and 2xH200 (multi_gpu:
    kernels on two GPUs, peer copies; bench/data/cupti_streams):
    the CUPTI source's batch reads back as its rows say, and every kernel, API call,
    flow and launch stack the source counted is in the trace."""
    streams = tmp_path / "streams"
    streams.mkdir()
    # A copy: the reader takes only regular files of the directory's owner (no links).
    shutil.copyfile(
        REPO / f"bench/data/cupti_streams/{workload}.xpstream", streams / "cupti-1.xpstream"
    )
    source = CuptiSource(streams)
    events = list(source.events())
    batches = [e for e in events if isinstance(e, model.SliceBatch)]
    assert len(batches) == 1
    path = tmp_path / "c.perfetto-trace"
    with TraceWriter(path) as w:
        w.producer("cupti").write_all(events)
    got, want = _fingerprint(path), _expected(batches)
    assert got["errors"] == []
    for key in ("slices", "flows", "samples"):
        assert got[key] == want[key], key
    _assert_lanes(got, want)
    counts = source.counts
    kernels = sum(1 for s in got["slices"] if s[3] == model.CAT_KERNEL)  # type: ignore[union-attr]
    assert kernels == counts["records_kernel"] == counts["cupti_delivered_kernel"] > 0
    assert len(got["flows"]) == counts["gpu_ops_with_flow"] == counts["gpu_ops"]  # type: ignore[arg-type]
    assert counts["launches_without_stack"] == 0
    assert len(got["samples"]) == counts["records_api"]  # type: ignore[arg-type]


def test_slices_after_a_batch_in_one_stream_are_all_written(tmp_path: Path) -> None:
    """Batches before and after another in the same stream of events are all written (a
    source that yields several, as a Kineto conversion in columns does)."""
    batch = make_batch(random.Random(5), n_cpu=20, n_gpu=10, threads=2, streams=2)
    before = [model.CpuSlice(PID, PID, 1_000 + i, 5, f"before {i}", "cpu_op") for i in range(3)]
    after = [model.CpuSlice(PID, PID, 90_000 + i * 10, 5, f"after {i}", "cpu_op") for i in range(3)]

    def written(events: list[model.Event], name: str) -> tuple[list[str], int]:
        path = tmp_path / name
        with TraceWriter(path) as w:
            p = w.producer("test")
            p.write(model.ProcessInfo(PID, "app"))
            p.write_all(events)
        with open_trace(path) as t:
            sql = "select name from slice where category = 'cpu_op' order by ts"
            return [r["name"] for r in t.query(sql)], t.scalar("select count(*) from slice")

    mixed = [as_batch(before), batch, as_batch(after)]
    names, total = written(mixed, "mixed.perfetto-trace")
    _, batch_alone = written([batch], "batch.perfetto-trace")
    assert names == [s.name for s in before + after]
    assert total == len(before) + len(after) + batch_alone
