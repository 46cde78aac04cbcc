"""Real-eBPF tests of the launch uprobes (root + bcc; CI runs them as root).

tests/native/launch_marker.c exports `xpu_perf_launch_marker(correlation_id, api_id)` like
the injection library does and calls it exactly N times: the probe must give N stacks with
the exact ids and lose nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collector.model import CAT_CUDA_API, NONE, CpuSlice, Frame, SliceBatch, SliceColumns, Stack
from collector.sources.bcc_uprobes import LaunchHit, with_launch_stacks
from tests.native.bpf_harness import STATS_ERRORS_SQL, metadata, query, record, requires_bpf
from tests.native.build import build_all
from tests.slice_batches import as_batch

N_LAUNCHES = 20_000

LAUNCH_SLICES_SQL = """
select s.ts, a.int_value as correlation_id
from slice s join args a on a.arg_set_id = s.arg_set_id and a.key = 'debug.correlation_id'
where s.category = 'cuda_api' and s.name = 'xpu_perf_launch_marker'
"""

LAUNCH_STACK_FRAMES_SQL = "select sample_id, up, name from xpu_launch_stack_frame"


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return build_all(tmp_path_factory.mktemp("native"))


@requires_bpf
def test_marker_called_n_times_gives_n_stacks(programs: dict[str, Path], tmp_path: Path) -> None:
    trace = tmp_path / "marker.perfetto-trace"
    exe = programs["launch_marker"]
    run = record(trace, "--no-cpu", "--marker", str(exe), "--", str(exe), str(N_LAUNCHES))
    assert run.returncode == 0, run.stderr

    launches = query(trace, LAUNCH_SLICES_SQL)
    assert sorted(r["correlation_id"] for r in launches) == list(range(1, N_LAUNCHES + 1))
    stack_count = query(trace, "select count(*) as n from xpu_launch_stack")[0]["n"]
    assert stack_count == N_LAUNCHES

    # Each stack: marker (leaf) <- launch_site <- main; the caller of a frameless function
    # hit at its first instruction is restored from the return address.
    frames: dict[int, list[str]] = {}
    for row in sorted(query(trace, LAUNCH_STACK_FRAMES_SQL), key=lambda r: r["up"]):
        frames.setdefault(row["sample_id"], []).append(row["name"])
    assert len(frames) == N_LAUNCHES
    for names in frames.values():
        assert names[:3] == ["xpu_perf_launch_marker", "launch_site", "main"], names

    assert query(trace, STATS_ERRORS_SQL) == []
    meta = metadata(trace)
    assert meta["ebpf_launch_stacks"] == N_LAUNCHES
    for counter in (
        "lost_ringbuf_full",
        "user_stack_errors",
        "probe_attach_errors",
        "decode_errors",
    ):
        assert meta[f"ebpf_launch_{counter}"] == 0, (counter, meta)


@requires_bpf
def test_probe_by_library_name_attaches_when_mapped(
    programs: dict[str, Path], tmp_path: Path
) -> None:
    """A probe given by file name (as for libcudart / libcuda) is found in the target's maps
    and attached; here the "library" is the libc every program maps."""
    trace = tmp_path / "byname.perfetto-trace"
    exe = programs["two_callers"]
    run = record(
        trace, "--no-cpu", "--uprobe", "libc.so:fclose", "--", str(exe), "1.5", str(tmp_path / "c")
    )
    assert run.returncode == 0, run.stderr
    # fclose runs once, at the end of the 1.5 s of work: long after the maps scan attached.
    rows = query(
        trace, "select count(*) as n from slice where category = 'cuda_api' and name = 'fclose'"
    )
    assert rows[0]["n"] == 1
    assert metadata(trace)["ebpf_launch_probe_attach_errors"] == 0


def test_with_launch_stacks_joins_by_pid_and_correlation_id() -> None:
    stack = Stack((Frame("main", "/bin/app", 0x10), Frame("launch", "/bin/app", 0x20)))
    hits = [LaunchHit(10, 11, 5, "xpu_perf_launch_marker", 7, 1, stack)]
    api = CpuSlice(10, 11, 4, 3, "cudaLaunchKernel", CAT_CUDA_API, {"correlation_id": 7})
    other_pid = CpuSlice(12, 12, 4, 3, "cudaLaunchKernel", CAT_CUDA_API, {"correlation_id": 7})
    counts: dict[str, int] = {}
    batches = [as_batch([api]), as_batch([other_pid])]  # batches without a stack column
    out = [s for b in with_launch_stacks(batches, hits, counts) for s in b.slices()]
    assert isinstance(out[0], CpuSlice) and out[0].launch_stack == stack
    assert isinstance(out[1], CpuSlice) and out[1].launch_stack is None
    assert counts == {"launch_stacks_joined": 1, "launch_stacks_unmatched": 0}


def test_with_launch_stacks_joins_batch_rows() -> None:
    """The CUPTI source's batches: an API row of the same pid and correlation id without a
    stack gets the hit's; rows of other categories, ids or with a stack keep theirs."""
    stack = Stack((Frame("main", "/bin/app", 0x10), Frame("launch", "/bin/app", 0x20)))
    own = Stack((Frame("main", "/bin/app", 0x10),))
    hits = [
        LaunchHit(10, 11, 5, "xpu_perf_launch_marker", 7, 1, stack),
        LaunchHit(10, 11, 6, "xpu_perf_launch_marker", 8, 1, stack),
        LaunchHit(10, 11, 6, "xpu_perf_launch_marker", 99, 1, stack),  # no such call
    ]
    cpu = SliceColumns(
        ts=[4, 5, 6, 7],
        dur=[1, 1, 1, 9],
        track=[11, 11, 11, 11],
        device=None,
        name=[0, 0, 0, 1],
        names=["cudaLaunchKernel", "range"],
        category=[0, 0, 0, 1],
        categories=[CAT_CUDA_API, "nvtx"],
        args=[0, 0, 0, 0],
        arg_sets=[{}],
        correlation_id=[7, 8, 9, NONE],
        stack=[NONE, 0, NONE, NONE],
        stacks=[own],
    )
    empty = SliceColumns([], [], [], [], [], [], [], [], [], [], [])
    batch = SliceBatch(10, cpu, empty, [], [])
    counts: dict[str, int] = {}
    (out,) = with_launch_stacks([batch], hits, counts)
    got = [s.launch_stack for s in out.slices() if isinstance(s, CpuSlice)]
    assert got == [stack, own, None, None]
    assert counts == {"launch_stacks_joined": 1, "launch_stacks_unmatched": 2}
