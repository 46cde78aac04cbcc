"""`xpu-perf merge`: per-rank traces (converted Kineto JSON, and traces in `record`'s form by
the real writer) merged and read back with trace_processor: everything of every input kept,
nothing collides, clocks aligned by the snapshots or by NCCL ends, bad input refused."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from exporters.perfetto.engine.trace_processor import Trace, open_trace
from exporters.perfetto.engine.views import load_views

from .conftest import run_cli
from .rank_traces import (
    MONO_T0_NS,
    NCCL_NAMES,
    RankSpec,
    kernels_per_rank,
    rank_kineto,
    recorded_rank_trace,
)

SKEW_US = 12_345.678  # rank 1's clock is this far ahead
BOOT, MONO, REAL = (
    pb.BUILTIN_CLOCK_BOOTTIME,
    pb.BUILTIN_CLOCK_MONOTONIC,
    pb.BUILTIN_CLOCK_REALTIME,
)
WALL = 1_780_000_000_000_000_000
# Node b's REALTIME snapshot differs from a's by this beyond its BOOTTIME/MONOTONIC readings.
CLOCK_OFFSET_NS = 7_000_000_777

COUNTS_SQL = """
select (select count(*) from slice) as slices,
       (select count(*) from flow) as flows,
       (select count(*) from slice where category = 'kernel') as kernels,
       (select count(*) from xpu_nccl_kernel) as nccl,
       (select count(*) from perf_sample) as samples,
       (select count(*) from xpu_launch_stack) as launch_stacks,
       -- launch stacks at their API call's exact time and thread (moved alike by a merge)
       (select count(*) from xpu_launch_stack ls join slice s on s.ts = ls.ts
        join thread_track tt on s.track_id = tt.id and tt.utid = ls.utid
        where s.category = 'cuda_api') as launch_stacks_paired,
       (select count(*) from xpu_cpu_sample) as cpu_samples,
       (select count(*) from stats where severity in ('error', 'data_loss') and value > 0)
         as errors
"""


def _counts(trace: Trace) -> dict[str, int]:
    load_views(trace)
    return trace.query(COUNTS_SQL)[0]


def _convert(tmp: Path, spec: RankSpec) -> Path:
    src = rank_kineto(tmp / f"rank{spec.rank}.json", spec)
    out = tmp / f"rank{spec.rank}.perfetto-trace"
    run_cli("convert", src, "-o", out, "-q", check=True)
    return out


@pytest.fixture(scope="module")
def kineto_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("kineto_ranks")
    return [
        _convert(tmp, RankSpec(0, host="node0")),
        _convert(tmp, RankSpec(1, host="node1", slow_us=50, skew_us=SKEW_US)),
    ]


def _snapshots() -> list[dict[int, int]]:
    """Node a: BOOTTIME 20 s ahead of MONOTONIC (a suspend); node b: no suspend, and its
    REALTIME reading puts its monotonic 0 CLOCK_OFFSET_NS later on the wall clock than
    a's."""
    return [
        {BOOT: 60_000_000_000, MONO: 40_000_000_000, REAL: WALL},
        {BOOT: 90_000_000_000, MONO: 90_000_000_000, REAL: WALL + 50_000_000_000 + CLOCK_OFFSET_NS},
    ]


@pytest.fixture(scope="module")
def recorded_ranks(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("recorded_ranks")
    a, b = _snapshots()
    return [
        recorded_rank_trace(tmp / "a.perfetto-trace", RankSpec(0, host="a"), a, (1, 2)),
        recorded_rank_trace(tmp / "b.perfetto-trace", RankSpec(1, host="b", slow_us=50), b, (1, 2)),
    ]


def _merge(inputs: list[Path], out: Path, *extra: str) -> str:
    proc = run_cli("merge", "-o", out, *inputs, *extra)
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def _metadata(trace: Trace) -> dict[str, object]:
    load_views(trace)
    return {
        r["key"]: r["value"]
        for r in trace.query(
            "select key, coalesce(int_value, string_value, real_value) as value from xpu_metadata"
        )
    }


@pytest.mark.parametrize("which", ["kineto_ranks", "recorded_ranks"])
def test_merge_keeps_every_event_of_every_input(
    which: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    inputs: list[Path] = request.getfixturevalue(which)
    out = tmp_path / "merged.perfetto-trace"
    _merge(inputs, out)
    singles = []
    for path in inputs:
        with open_trace(path) as t:
            singles.append(_counts(t))
    with open_trace(out) as t:
        merged = _counts(t)
        processes = t.query("select pid, rank, host from xpu_process order by rank")
        meta = _metadata(t)
        gpus = [r["name"] for r in t.query("select name from track where name glob 'GPU *'")]
    assert merged["errors"] == 0
    assert all(s["kernels"] == kernels_per_rank(RankSpec(0)) for s in singles)
    for key in (
        "flows",
        "kernels",
        "nccl",
        "samples",
        "launch_stacks",
        "launch_stacks_paired",
        "cpu_samples",
    ):
        assert merged[key] == sum(s[key] for s in singles), key
    # Every slice of both, and the merge's own metadata instant.
    assert merged["slices"] == sum(s["slices"] for s in singles) + 1
    # Both inputs used pid 4242: the ranks stay two processes, each with its host.
    assert [p["rank"] for p in processes] == [0, 1]
    assert len({p["pid"] for p in processes}) == 2
    hosts = [p["host"] for p in processes]
    assert hosts == (["node0", "node1"] if which == "kineto_ranks" else ["a", "b"])
    assert sorted(gpus) == [f"GPU 0 (NVIDIA H200) [{h}]" for h in hosts]
    # Each input's metadata kept under its own keys, the merge's beside them.
    assert meta["input0_host"] == hosts[0] and meta["input1_host"] == hosts[1]
    assert meta["merge_inputs"] == 2
    assert meta["merge_input1_pids_moved"] == 1
    assert meta["tool"] == "xpu-perf"


def test_clock_snapshots_align_the_inputs_on_the_wall_clock(
    recorded_ranks: list[Path], tmp_path: Path
) -> None:
    """The same step starts at the same monotonic time on both nodes, whose clocks relate
    to the wall clock differently: merged, the two starts are as far apart as the wall
    clock says."""
    out = tmp_path / "merged.perfetto-trace"
    _merge(recorded_ranks, out)
    a, b = _snapshots()
    wall = [MONO_T0_NS - s[MONO] + s[REAL] for s in (a, b)]  # step 0's start on each node
    with open_trace(out) as t:
        load_views(t)
        starts = {
            r["host"]: r["ts"]
            for r in t.query(
                "select p.host, s.ts from slice s join thread_track tt on s.track_id = tt.id "
                "join thread using (utid) join xpu_process p using (upid) "
                "where s.name = 'step 0'"
            )
        }
        meta = _metadata(t)
    assert starts["b"] - starts["a"] == wall[1] - wall[0]
    offsets = [meta["merge_input0_offset_ns"], meta["merge_input1_offset_ns"]]
    assert min(offsets) == 0
    bases = [s[REAL] - s[BOOT] for s in (a, b)]
    assert offsets[1] - offsets[0] == bases[1] - bases[0]
    assert meta["merge_input0_clock_source"] == "realtime"


def test_align_none_keeps_each_input_time(recorded_ranks: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "merged.perfetto-trace"
    _merge(recorded_ranks, out, "--align", "none")
    query = "select min(ts) as ts from slice where category = 'kernel'"
    alone = []
    for path in recorded_ranks:
        with open_trace(path) as t:
            alone.append(t.scalar(query))
    with open_trace(out) as t:
        merged = t.scalar(query)
        meta = _metadata(t)
    assert merged == min(alone)
    assert meta["merge_input0_offset_ns"] == 0 and meta["merge_input1_offset_ns"] == 0


def test_nccl_alignment_removes_a_known_skew(kineto_ranks: list[Path], tmp_path: Path) -> None:
    """Converted traces have no REALTIME snapshot (offset 0 by clock); rank 1's clock is
    SKEW_US ahead.  --align nccl lines the collective ends up exactly."""
    out = tmp_path / "merged.perfetto-trace"
    summary = _merge(kineto_ranks, out, "--align", "nccl")
    skew_ns = round(SKEW_US * 1000)
    with open_trace(out) as t:
        meta = _metadata(t)  # loads the views
        ends = t.query(
            "select p.rank, k.name, k.ts + k.dur as end_ts from xpu_nccl_kernel k "
            "join slice a on a.id = k.api_id join thread_track tt on tt.id = a.track_id "
            "join thread using (utid) join xpu_process p using (upid) order by p.rank, k.ts"
        )
    assert meta["merge_input0_clock_source"] == "none"
    assert meta["merge_input0_offset_ns"] == skew_ns
    assert meta["merge_input1_offset_ns"] == 0
    assert meta["merge_nccl_spread_median_before_ns"] == skew_ns
    assert meta["merge_nccl_spread_max_before_ns"] == skew_ns
    assert meta["merge_nccl_spread_max_after_ns"] == 0
    assert meta["merge_nccl_collectives_compared"] == 3 * 4
    by_rank = [[(r["name"], r["end_ts"]) for r in ends if r["rank"] == k] for k in (0, 1)]
    assert len(by_rank[0]) == 12 and by_rank[0] == by_rank[1]
    assert {name for name, _ in by_rank[0]} == set(NCCL_NAMES)
    assert "no REALTIME clock snapshot" in summary
    assert "NCCL end spread before: median 12.346 ms" in summary
    assert "NCCL end spread after:  median 0.0 us, max 0.0 us" in summary


def test_merged_trace_merges_again(kineto_ranks: list[Path], tmp_path: Path) -> None:
    """A merged trace is an input like any other: ids stay apart a level further."""
    first = tmp_path / "first.perfetto-trace"
    _merge(kineto_ranks, first)
    second = tmp_path / "second.perfetto-trace"
    _merge([first, *kineto_ranks], second)
    with open_trace(first) as t:
        once = _counts(t)
    with open_trace(second) as t:
        twice = _counts(t)
        pids = t.query("select pid from xpu_process")
    assert twice["errors"] == 0
    assert twice["kernels"] == 2 * once["kernels"]
    assert twice["flows"] == 2 * once["flows"]
    assert len(pids) == 4 and len({p["pid"] for p in pids}) == 4


# -- bad input: one line, exit status 2, nothing left under the output's name -----------
def _assert_refused(proc_args: list[object], out: Path, message: str) -> None:
    proc = run_cli("merge", "-o", out, *proc_args)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not out.exists()
    assert not out.with_name(out.name + ".tmp").exists()


def test_missing_input(kineto_ranks: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "m.perfetto-trace"
    _assert_refused([kineto_ranks[0], tmp_path / "nope.perfetto-trace"], out, "no such trace")


def test_truncated_input(kineto_ranks: list[Path], tmp_path: Path) -> None:
    cut = tmp_path / "cut.perfetto-trace"
    data = kineto_ranks[1].read_bytes()
    cut.write_bytes(data[: len(data) - 10])
    _assert_refused([kineto_ranks[0], cut], tmp_path / "m.perfetto-trace", "truncated")


def test_not_a_trace(kineto_ranks: list[Path], tmp_path: Path) -> None:
    text = tmp_path / "notes.perfetto-trace"
    text.write_text(json.dumps({"traceEvents": []}))
    _assert_refused([kineto_ranks[0], text], tmp_path / "m.perfetto-trace", "not a Perfetto")


def test_corrupt_chunk_leaves_no_output(kineto_ranks: list[Path], tmp_path: Path) -> None:
    """Framing intact, deflate stream broken: found while writing; the partial output is
    removed."""
    bad = tmp_path / "bad.perfetto-trace"
    data = bytearray(kineto_ranks[1].read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(16)
    bad.write_bytes(bytes(data))
    _assert_refused([kineto_ranks[0], bad], tmp_path / "m.perfetto-trace", "bad.perfetto-trace")


def test_output_not_writable(kineto_ranks: list[Path], tmp_path: Path) -> None:
    _assert_refused(kineto_ranks, tmp_path / "no" / "m.perfetto-trace", "no directory")
    target = tmp_path / "a_directory"
    target.mkdir()
    proc = run_cli("merge", "-o", target, *kineto_ranks)
    assert proc.returncode == 2 and "cannot write" in proc.stderr, proc.stderr
    assert target.is_dir() and not (tmp_path / "a_directory.tmp").exists()


def test_output_must_not_be_an_input(kineto_ranks: list[Path], tmp_path: Path) -> None:
    copy = tmp_path / "copy.perfetto-trace"
    shutil.copy(kineto_ranks[0], copy)
    before = copy.read_bytes()
    proc = run_cli("merge", "-o", copy, copy, kineto_ranks[1])
    assert proc.returncode == 2 and "also an input" in proc.stderr
    assert copy.read_bytes() == before
    assert os.listdir(tmp_path) == ["copy.perfetto-trace"]


def test_record_output_merges_with_a_copy_of_itself(tmp_path: Path) -> None:
    """The real `record` path (fake CUPTI: the injection library, the columnar writer,
    launch stacks; CPU samples where eBPF runs): two copies stand for two nodes that
    recorded the same pids."""
    from .report_inputs import record_fake_gpu_app

    recorded = record_fake_gpu_app(tmp_path).path
    copy = tmp_path / "copy.perfetto-trace"
    shutil.copy(recorded, copy)
    out = tmp_path / "merged.perfetto-trace"
    _merge([recorded, copy], out)
    with open_trace(recorded) as t:
        alone = _counts(t)
        processes = t.scalar("select count(*) from xpu_process")
    with open_trace(out) as t:
        merged = _counts(t)
        pids = [r["pid"] for r in t.query("select pid from xpu_process")]
    assert alone["kernels"] > 0 and alone["launch_stacks"] > 0
    assert alone["launch_stacks_paired"] == alone["launch_stacks"]
    assert merged["errors"] == 0
    for key in ("flows", "kernels", "samples", "launch_stacks", "launch_stacks_paired"):
        assert merged[key] == 2 * alone[key], key
    assert merged["cpu_samples"] == 2 * alone["cpu_samples"]
    assert merged["slices"] == 2 * alone["slices"] + 1
    assert len(pids) == 2 * processes == len(set(pids))
