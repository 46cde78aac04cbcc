"""Capture windows end to end without a GPU: `record --capture-range cudaProfilerApi` and
`record --delay/--duration` against the fake CUPTI (tests/fake_cupti), which delivers the
profiler start/stop callbacks and, as CUPTI does, makes no activity records for a kind that is
disabled.  The trace is read back with trace_processor: exactly the work inside the windows,
every GPU op with its flow and every API call with its stack, the window slices and metadata."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.perfetto.engine.trace_processor import open_trace

from .fake_cupti.build import FakeCupti
from .test_cupti_fake import (
    GPU_CATS,
    LAUNCHES,
    PARENT_KERNELS,
    metadata,
    pytestmark,  # noqa: F401 (skips this module where the CUPTI headers are missing)
    record,
)

WINDOW_LAUNCHES = 50  # fake_app's LAUNCHES in the profiler mode: per phase
SECOND_WINDOW = 7  # its driver-only launches inside the cuProfilerStart/Stop window
FIRST_WINDOW_KERNELS = {"window_kernel": WINDOW_LAUNCHES, "long_window_kernel": 1}


def kernel_names(t) -> dict[str, int]:
    rows = t.query("select name, count(*) n from slice where category = 'kernel' group by name")
    return {r["name"]: r["n"] for r in rows}


def windows(t) -> list[dict]:
    return t.query(
        "select s.ts, s.dur, s.name, "
        "extract_arg(s.arg_set_id, 'debug.reason') reason, "
        "extract_arg(s.arg_set_id, 'debug.end_reason') end_reason, "
        "pt.name parent from slice s join track tr on s.track_id = tr.id "
        "join track pt on tr.parent_id = pt.id "
        "where s.category = 'xpu_perf_window' order by s.ts"
    )


def assert_complete(t) -> None:
    """Every GPU op has its flow from an API call, every API call its launch stack, and the
    trace has no import errors."""
    no_flow = t.scalar(
        f"select count(*) from slice g where g.category in {GPU_CATS} "
        "and not exists (select 1 from flow f where f.slice_in = g.id)"
    )
    assert no_flow == 0
    api = t.scalar("select count(*) from slice where category = 'cuda_api'")
    assert t.scalar("select count(*) from cpu_profile_stack_sample") == api  # launch stacks
    assert metadata(t, "cupti_launches_without_stack") == 0
    assert metadata(t, "cupti_gpu_ops_without_api") == 0
    errors = t.scalar(
        "select count(*) from stats where severity in ('error', 'data_loss') and value > 0"
    )
    assert errors == 0


def assert_inside(t, window: dict) -> None:
    """Every recorded API call starts inside the window."""
    outside = t.scalar(
        "select count(*) from slice where category = 'cuda_api' "
        f"and (ts < {window['ts']} or ts > {window['ts'] + window['dur']})"
    )
    assert outside == 0


@pytest.mark.parametrize(
    ("end", "kernels", "n_windows"),
    [
        (None, FIRST_WINDOW_KERNELS, 1),
        ("repeat:1", FIRST_WINDOW_KERNELS, 1),
        ("repeat", {**FIRST_WINDOW_KERNELS, "second_window_kernel": SECOND_WINDOW}, 2),
    ],
)
def test_profiler_api_window_records_only_inside(
    fake: FakeCupti, tmp_path: Path, end: str | None, kernels: dict[str, int], n_windows: int
) -> None:
    out = tmp_path / "win.perfetto-trace"
    flags = ("--capture-range", "cudaProfilerApi")
    if end:
        flags += ("--capture-range-end", end)
    proc = record(fake, out, fake.app, WINDOW_LAUNCHES, 4, "profiler", flags=flags)
    assert proc.returncode == 4, proc.stderr
    assert f"capture windows (cudaProfilerApi): {n_windows}" in proc.stderr
    # Before the first window the traced APIs' callbacks were off in CUPTI, not filtered.
    assert "fake_app: API callbacks before the window: 0\n" in proc.stdout
    with open_trace(out) as t:
        # No outside_kernel: launches outside the windows made no kernel and no API row.
        assert kernel_names(t) == kernels
        # The library got no records of them either (the kinds were off in CUPTI).
        assert metadata(t, "cupti_delivered_kernel") == sum(kernels.values())
        assert t.scalar("select count(*) from slice where category = 'memcpy'") == 1
        assert t.scalar("select count(*) from slice where category = 'sync'") == 1
        api = t.query(
            "select name, count(*) n from slice where category = 'cuda_api' group by name"
        )
        # The start/stop calls themselves are not traced.
        expected_api = {
            "cudaLaunchKernel": WINDOW_LAUNCHES + 1,
            "cudaMemcpyAsync": 1,
            "cudaDeviceSynchronize": 1,
        }
        if n_windows == 2:
            expected_api["cuLaunchKernel"] = SECOND_WINDOW
        assert {r["name"]: r["n"] for r in api} == expected_api
        assert_complete(t)
        found = windows(t)
        assert [(w["name"], w["reason"], w["end_reason"]) for w in found] == [
            ("capture window (cudaProfilerApi)", "cudaProfilerApi", "cudaProfilerStop"),
            ("capture window (cudaProfilerApi)", "cudaProfilerApi", "cuProfilerStop"),
        ][:n_windows]
        assert {w["parent"] for w in found} == {"xpu-perf"}
        first_window_api = t.scalar(
            "select count(*) from slice where category = 'cuda_api' "
            f"and ts between {found[0]['ts']} and {found[0]['ts'] + found[0]['dur']}"
        )
        assert first_window_api == WINDOW_LAUNCHES + 3
        # Launched inside the window, running past its end: kept.
        long_end = t.scalar("select ts + dur from slice where name = 'long_window_kernel'")
        assert long_end > found[0]["ts"] + found[0]["dur"]
        if n_windows == 1:
            assert_inside(t, found[0])
        assert metadata(t, "windows") == n_windows
        assert metadata(t, "capture_range") == "cudaProfilerApi"
        # --capture-range-end stop / repeat:1: the second cuProfilerStart is counted, ignored.
        assert metadata(t, "cupti_windows_ignored") == (1 if n_windows == 1 else 0)


def test_without_window_options_everything_is_recorded(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "all.perfetto-trace"
    proc = record(fake, out, fake.app, WINDOW_LAUNCHES, 0, "profiler")
    assert proc.returncode == 0, proc.stderr
    assert "capture windows" not in proc.stderr
    # Without windows each outside launch calls back twice (enter, exit) in both APIs.
    assert f"API callbacks before the window: {4 * WINDOW_LAUNCHES}\n" in proc.stdout
    with open_trace(out) as t:
        assert kernel_names(t) == {
            "outside_kernel": 2 * WINDOW_LAUNCHES + 3,
            **FIRST_WINDOW_KERNELS,
            "second_window_kernel": SECOND_WINDOW,
        }
        assert windows(t) == []
        assert metadata(t, "cupti_windows") == 0
        assert metadata(t, "windows") is None
        assert_complete(t)


def test_delay_and_duration_window(fake: FakeCupti, tmp_path: Path) -> None:
    # fake_app "delay": 20 launches each at 0 s, 1 s and 2 s after its start; the window
    # [0.5 s, 1.5 s] holds only the middle ones, with 0.5 s of margin on each side.
    out = tmp_path / "delay.perfetto-trace"
    flags = ("--delay", "0.5", "--duration", "1")
    proc = record(fake, out, fake.app, 1, 5, "delay", flags=flags)
    # --duration with --delay is the window's length: the target runs to its own end.
    assert proc.returncode == 5, proc.stderr
    assert "fake_app: delay phases done" in proc.stdout
    assert "capture windows (delay): 1" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {"window_kernel": 20}
        assert metadata(t, "cupti_delivered_kernel") == 20
        assert_complete(t)
        (window,) = windows(t)
        assert (window["reason"], window["end_reason"]) == ("delay", "duration")
        assert abs(window["dur"] - 1_000_000_000) < 50_000_000
        assert_inside(t, window)
        assert metadata(t, "windows") == 1
        assert metadata(t, "capture_range") == "delay"


def test_delay_without_duration_lasts_until_exit(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "delay_exit.perfetto-trace"
    proc = record(fake, out, fake.app, 1, 0, "delay", flags=("--delay", "1.5"))
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {"after_kernel": 20}
        assert_complete(t)
        (window,) = windows(t)
        assert (window["reason"], window["end_reason"]) == ("delay", "exit")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--capture-range-end", "repeat"), "--capture-range-end needs --capture-range"),
        (
            ("--capture-range", "cudaProfilerApi", "--capture-range-end", "repeat:0"),
            "--capture-range-end repeat:0: give stop, repeat or repeat:N (N >= 1)",
        ),
        (
            ("--capture-range", "cudaProfilerApi", "--delay", "1"),
            "--delay and --capture-range are exclusive: give one of them",
        ),
        (("--delay", "-1"), "--delay -1.0: give a number of seconds >= 0"),
        (
            ("--capture-range", "cudaProfilerApi", "--no-gpu"),
            "--capture-range cudaProfilerApi: the GPU recording sees those calls; drop --no-gpu",
        ),
        (("--capture-range", "nvtx:"), "--capture-range nvtx:: give nvtx:NAME or nvtx:NAME@DOMAIN"),
        (("--capture-range", "nvtx:step@"), "give nvtx:NAME or nvtx:NAME@DOMAIN"),
        (("--capture-range", "steps"), "--capture-range steps: give cudaProfilerApi"),
        (("--toggle-signal", "USR1"), "--toggle-signal needs --capture-range signal"),
        (
            ("--capture-range", "signal", "--toggle-signal", "NOPE"),
            "--toggle-signal NOPE: not a signal name",
        ),
        (
            ("--capture-range", "signal", "--toggle-signal", "INT"),
            "--toggle-signal INT: record needs that one",
        ),
    ],
)
def test_bad_window_options_are_one_line_errors(
    fake: FakeCupti, tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    out = tmp_path / "bad.perfetto-trace"
    proc = record(fake, out, "true", flags=flags)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not out.exists()


def test_profiler_window_never_opened_says_so(fake: FakeCupti, tmp_path: Path) -> None:
    # The ordinary scenario never calls cudaProfilerStart: nothing is recorded, and said.
    out = tmp_path / "none.perfetto-trace"
    proc = record(
        fake, out, fake.app, 10, 0, "two_devices", flags=("--capture-range", "cudaProfilerApi")
    )
    assert proc.returncode == 0, proc.stderr
    assert "capture windows: none (no process called cudaProfilerStart" in proc.stderr
    with open_trace(out) as t:
        assert kernel_names(t) == {}
        assert metadata(t, "windows") == 0
        assert t.scalar("select count(*) from slice where category = 'cuda_api'") == 0


def test_max_size_cuts_the_recording_cleanly(fake: FakeCupti, tmp_path: Path) -> None:
    # fake_app "loop" launches 100 kernels every 10 ms until stopped: ~1.2 MB of streams a
    # second; the library hands CUPTI's buffers over every second, so the cut comes at ~1 s.
    out = tmp_path / "cut.perfetto-trace"
    proc = record(fake, out, fake.app, 100, 0, "loop", flags=("--max-size", "0.5"))
    assert proc.returncode == 128 + 2, proc.stderr  # stopped by SIGINT, as by --duration
    assert "recording cut by --max-size 0.5 MB" in proc.stderr
    # The trace is made of the recorded data and deflated: smaller than the limit.
    assert out.stat().st_size < 500_000
    with open_trace(out) as t:
        assert_complete(t)  # valid: the target flushed on the signal, every flow and stack
        kernels = t.scalar("select count(*) from slice where category = 'kernel'")
        assert kernels >= 1000  # at least the second's worth that reached the limit
        assert metadata(t, "cut_by_max_size") == 1
        assert metadata(t, "max_size_bytes") == 500_000
        assert metadata(t, "cut_recorded_bytes") >= 500_000
        first, last = t.query(
            "select min(ts) a, max(ts + dur) b from slice where category = 'kernel'"
        )[0].values()
        assert first <= metadata(t, "cut_at_ns") <= last + 3_000_000_000


def test_max_size_not_reached_records_everything(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "uncut.perfetto-trace"
    proc = record(fake, out, fake.app, WINDOW_LAUNCHES, 0, "profiler", flags=("--max-size", "100"))
    assert proc.returncode == 0, proc.stderr
    assert "recording cut" not in proc.stderr
    with open_trace(out) as t:
        assert sum(kernel_names(t).values()) == 3 * WINDOW_LAUNCHES + 3 + 1 + SECOND_WINDOW
        assert metadata(t, "cut_by_max_size") == 0
        assert metadata(t, "cut_at_ns") == 0
        assert metadata(t, "max_size_bytes") == 100_000_000


def test_bad_max_size_is_a_one_line_error(fake: FakeCupti, tmp_path: Path) -> None:
    proc = record(fake, tmp_path / "bad.perfetto-trace", "true", flags=("--max-size", "0"))
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == "xpu-perf record: error: --max-size 0.0: give a number of megabytes > 0"
    )


def test_delay_zero_records_the_whole_tree_forked_child_included(
    fake: FakeCupti, tmp_path: Path
) -> None:
    # The ordinary scenario (main + worker thread, a forked child): a window from the start
    # to each process's exit records what a run without windows records.
    out = tmp_path / "delay0.perfetto-trace"
    proc = record(fake, out, fake.app, LAUNCHES, 3, flags=("--delay", "0"))
    assert proc.returncode == 3, proc.stderr
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice where category = 'kernel'") == PARENT_KERNELS
        assert_complete(t)
        found = windows(t)
        assert [(w["reason"], w["end_reason"]) for w in found] == [("delay", "exit")] * 2
        assert metadata(t, "windows") == 2  # the parent's and the forked child's
