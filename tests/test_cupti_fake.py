"""CUPTI injection end to end without a GPU: the real injection library, transport and
collector against a fake libcupti (tests/fake_cupti) that replays scripted API callbacks and
activity buffers — runtime and driver-only launches, a CUDA graph, copies, a memset, syncs,
an untraced API, dropped records, many small buffers, a second thread and a forked child
(CPU work only, ending through _exit) — into a Perfetto trace read back with trace_processor."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from collector import model
from collector.sources.cupti import CuptiSource
from collector.sources.cupti_stream import read_stream
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

from .conftest import REPO
from .fake_cupti.build import FakeCupti, cupti_headers

pytestmark = pytest.mark.skipif(cupti_headers() is None, reason="CUPTI headers not installed")

LAUNCHES = 200
# fake_app: parent = 2*LAUNCHES (main + worker) + 10 driver-only + 5 graph + 5 after fork.
PARENT_KERNELS = 2 * LAUNCHES + 10 + 5 + 5
GPU_CATS = "('kernel','memcpy','memset','sync')"


def record(
    fake: FakeCupti,
    out: Path,
    *cmd: str | Path,
    extra_env: dict[str, str] | None = None,
    flags: tuple[str, ...] = (),
) -> subprocess.CompletedProcess[str]:
    env = dict(
        os.environ, XPU_PERF_INJECT_LIB=str(fake.injection), FAKE_CUPTI_RECORDS_PER_BUFFER="64"
    )
    env.update(extra_env or {})
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "collector.cli",
            "record",
            "--no-cpu",
            *flags,
            "-o",
            str(out),
            "--",
            *map(str, cmd),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )


def metadata(t, key: str):
    return t.scalar(
        "select coalesce(a.int_value, a.string_value) from slice s join args a using (arg_set_id) "
        f"where s.category = 'xpu_perf_metadata' and a.key = 'debug.{key}'"
    )


@pytest.fixture(scope="module")
def app_trace(
    fake: FakeCupti, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path_factory.mktemp("rec") / "fake.perfetto-trace"
    proc = record(fake, out, fake.app, LAUNCHES, 3)
    return out, proc


def test_exit_code_passes_through_and_summary_printed(app_trace) -> None:
    _, proc = app_trace
    assert proc.returncode == 3, proc.stderr
    assert "dropped: cupti=3 transport=0" in proc.stderr
    # + a copy, a memset and two syncs
    assert f"gpu ops without api call: 0 of {PARENT_KERNELS + 4}" in proc.stderr


def test_forked_child_ends_with_its_final_flush_and_no_cupti_call(app_trace) -> None:
    """A fork of a process that set CUPTI up ends through _exit (a DataLoader worker): its
    stream gets its final flush without calling into CUPTI, which the fake (like the real
    library on the H100, where such workers hung until their parent killed them) aborts on."""
    _, proc = app_trace
    assert "(processes=2)" in proc.stderr, proc.stderr
    assert "forked child" not in proc.stderr, proc.stderr
    assert "without their final" not in proc.stderr, proc.stderr


def test_every_kernel_lands_with_a_flow_from_its_api_call(app_trace) -> None:
    out, _ = app_trace
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice where category = 'kernel'") == PARENT_KERNELS
        assert t.scalar("select count(*) from slice where category = 'memcpy'") == 1
        assert t.scalar("select count(*) from slice where category = 'memset'") == 1
        # Device sync + stream sync, both from the API callbacks (the fake's
        # SYNCHRONIZATION record is ignored: that kind is not on).
        assert t.scalar("select count(*) from slice where category = 'sync'") == 2
        stream_sync = t.query(
            "select s.name, t.name as track, s.dur from slice s join track t on s.track_id = t.id "
            "where s.category = 'sync' and s.name glob '*tream*'"
        )
        assert [(r["track"], r["dur"] >= 2000) for r in stream_sync] == [("Stream 7", True)]
        no_flow = t.scalar(
            f"select count(*) from slice g where g.category in {GPU_CATS} "
            "and not exists (select 1 from flow f where f.slice_in = g.id)"
        )
        assert no_flow == 0
        # Each flow starts at the cuda_api slice with the GPU op's correlation id.
        mismatched = t.scalar(
            "select count(*) from flow f join slice a on a.id = f.slice_out "
            "join slice g on g.id = f.slice_in "
            "join args aa on aa.arg_set_id = a.arg_set_id and aa.key = 'debug.correlation_id' "
            "join args ga on ga.arg_set_id = g.arg_set_id and ga.key = 'debug.correlation_id' "
            "where a.category = 'cuda_api' and aa.int_value != ga.int_value"
        )
        # Driver-only launches and runtime launches both carry the outer call's id.
        assert mismatched == 0
        assert t.scalar("select count(*) from slice where name = 'cudaGetDevice'") == 0
        assert (
            t.scalar(
                "select count(*) from stats where severity in ('error', 'data_loss') and value > 0"
            )
            == 0
        )


def test_graph_launch_flows_to_every_graph_kernel(app_trace) -> None:
    out, _ = app_trace
    with open_trace(out) as t:
        rows = t.query(
            "select a.name api, count(*) n from flow f join slice a on a.id = f.slice_out "
            "join slice g on g.id = f.slice_in where g.name = 'graph_kernel' group by a.id"
        )
        assert rows == [{"api": "cudaGraphLaunch", "n": 5}]


def test_threads_have_their_own_tracks(app_trace) -> None:
    out, _ = app_trace
    with open_trace(out) as t:
        per_thread = t.query(
            "select p.pid, t.tid, count(*) n from slice s "
            "join thread_track tt on s.track_id = tt.id "
            "join thread t using (utid) join process p using (upid) "
            "where s.category = 'cuda_api' group by t.utid order by n desc"
        )
        assert len({r["pid"] for r in per_thread}) == 1  # the forked child made no CUDA call
        counts = sorted(r["n"] for r in per_thread)
        # worker: LAUNCHES; main: the rest (2 syncs).
        assert counts == sorted([LAUNCHES, LAUNCHES + 10 + 1 + 1 + 1 + 1 + 1 + 5])
        unnamed = t.scalar("select count(*) from slice where name like 'cuda_api_0x%'")
        assert unnamed == 0


def test_launch_stacks_are_symbolized(app_trace) -> None:
    out, _ = app_trace
    with open_trace(out) as t:
        frames = {r["name"] for r in t.query("select distinct name from stack_profile_frame")}
        assert {"model_forward_layer", "triton_style_launch", "main"} <= frames
        # One launch-stack sample per API call, every one with a frame of the application.
        load_views(t)
        samples = t.scalar("select count(*) from xpu_launch_stack")
        assert t.scalar("select count(*) from perf_sample") == 0  # the UI's CPU flamegraph
        api = t.scalar("select count(*) from slice where category = 'cuda_api'")
        assert samples == api
        # Each at its API call's exact time and thread (how SQL pairs them: the
        # microsecond sample time plus its ns rest).
        paired = t.scalar(
            "select count(*) from xpu_launch_stack ls join slice s on s.ts = ls.ts "
            "join thread_track tt on s.track_id = tt.id and tt.utid = ls.utid "
            "where s.category = 'cuda_api'"
        )
        assert paired == api
        # ... and its frames, innermost first, in the API slice's details.
        shown = t.query(
            "select extract_arg(arg_set_id, 'debug.launch_stack') as frames from slice "
            "where category = 'cuda_api'"
        )
        assert all(r["frames"] for r in shown)
        assert any(" <- " in r["frames"] for r in shown)
        # The worker thread's entry in the C runtime (clone3, start_thread) is not shown: its
        # launches read as the thread's function alone.
        threads = {r["frames"] for r in shown if r["frames"].endswith("worker")}
        assert threads == {"worker"}, threads
        innermost = {r["frames"].split(" <- ")[0] for r in shown}
        assert {"model_forward_layer", "triton_style_launch"} <= innermost
        assert metadata(t, "cupti_launches_without_stack") == 0
        assert metadata(t, "cupti_launches_with_user_frame") == metadata(t, "cupti_launches")
        assert metadata(t, "cupti_dropped_records") == 3
        assert metadata(t, "cupti_transport_dropped_rows") == 0


def test_python_frames_in_launch_stacks(fake: FakeCupti, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import ctypes
        lib = ctypes.CDLL({str(fake.lib_dir / "libcupti.so.13")!r})
        lib.fake_launch_kernel.argtypes = [ctypes.c_char_p, ctypes.c_uint32, ctypes.c_int]
        lib.fake_cuInit()

        def train_step(i):
            lib.fake_launch_kernel(b"py_kernel", 1, 0)

        def train():
            for i in range(50):
                train_step(i)

        train()
        lib.fake_device_synchronize()
    """)
    )
    out = tmp_path / "py.perfetto-trace"
    proc = record(fake, out, sys.executable, script)
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        frames = {r["name"] for r in t.query("select distinct name from stack_profile_frame")}
        assert "train_step (train.py:8)" in frames, sorted(frames)[:50]
        assert "train (train.py:12)" in frames
        assert "<module> (train.py:14)" in frames
        # The Python frames sit where the interpreter ran them: train_step is called by train.
        assert metadata(t, "cupti_python_guard_failures") == 0
    proc = record(
        fake, tmp_path / "nopy.perfetto-trace", sys.executable, script, flags=("--no-python",)
    )
    with open_trace(tmp_path / "nopy.perfetto-trace") as t:
        frames = {r["name"] for r in t.query("select distinct name from stack_profile_frame")}
        assert not any("train.py" in f for f in frames)


def test_sigterm_flushes_the_stream(fake: FakeCupti, tmp_path: Path) -> None:
    streams = tmp_path / "streams"
    streams.mkdir()
    env = dict(
        os.environ,
        CUDA_INJECTION64_PATH=str(fake.injection),
        XPU_PERF_OUT_DIR=str(streams),
        XPU_PERF_FLUSH_MS="100000",
    )
    proc = subprocess.Popen(
        [str(fake.app), "100", "0", "wait"], env=env, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    (path,) = streams.iterdir()
    stream = read_stream(path)
    assert not stream.truncated
    assert stream.table("KERNEL").rows == 200  # main + worker, delivered by the final flush
    assert stream.table("API").rows == 200
    names = stream.table("COUNTER")["name"]
    assert "transport_bytes" in names


def test_bounded_queue_counts_transport_drops(fake: FakeCupti, tmp_path: Path) -> None:
    streams = tmp_path / "streams"
    streams.mkdir()
    env = dict(
        os.environ,
        CUDA_INJECTION64_PATH=str(fake.injection),
        XPU_PERF_OUT_DIR=str(streams),
        XPU_PERF_FLUSH_MS="100000",
        XPU_PERF_QUEUE_KB="8",
        FAKE_CUPTI_RECORDS_PER_BUFFER="32",
    )
    subprocess.run([str(fake.app), "2000"], env=env, check=True, capture_output=True)
    source = CuptiSource(streams)
    slices = [s for e in source.events() if isinstance(e, model.SliceBatch) for s in e.slices()]
    assert source.counts["transport_dropped_rows"] > 0
    kernels = sum(1 for s in slices if s.category == "kernel")
    # What was not dropped is intact; nothing is counted twice.
    assert 0 < kernels < 2 * 2000 + 30


def test_target_without_cuda_says_so(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "nocuda.perfetto-trace"
    proc = record(fake, out, "sh", "-c", "exit 4")
    assert proc.returncode == 4, proc.stderr
    assert "no GPU activity: no process of the target initialised CUDA" in proc.stderr
    with open_trace(out) as t:
        assert t.scalar("select count(*) from slice where category = 'kernel'") == 0


@pytest.mark.parametrize("sync_activity", ["0", "1"])
def test_sync_ops_land_on_their_own_gpu(
    fake: FakeCupti, tmp_path: Path, sync_activity: str
) -> None:
    """A sync on device 1's context goes on GPU 1's tracks, from the API callbacks (the
    device of the call's context) and from CUPTI's SYNCHRONIZATION records (the context's
    device, learned from its kernels)."""
    out = tmp_path / "two.perfetto-trace"
    proc = record(
        fake,
        out,
        fake.app,
        0,
        0,
        "two_devices",
        extra_env={"XPU_PERF_SYNC_ACTIVITY": sync_activity},
    )
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        rows = t.query(
            "select s.category, s.name, p.name as gpu, t.name as stream, count(*) as n "
            "from slice s join track t on s.track_id = t.id join track p on t.parent_id = p.id "
            "where s.category in ('kernel', 'sync') group by 1, 2, 3, 4"
        )
    got = {(r["category"], r["gpu"], r["stream"]): r["n"] for r in rows}
    gpu0, gpu1 = "GPU 0 (Fake GPU 9000)", "GPU 1 (Fake GPU 9001)"
    want = {
        ("kernel", gpu1, "Stream 13"): 3,
        ("kernel", gpu0, "Stream 7"): 2,
        ("sync", gpu1, "Stream 0"): 1,  # cudaDeviceSynchronize on device 1
        ("sync", gpu0, "Stream 0"): 1,
    }
    if sync_activity == "0":  # the fake sends no SYNCHRONIZATION record for a stream sync
        want[("sync", gpu1, "Stream 13")] = 1
    assert got == want, rows


def test_killed_target_keeps_what_was_flushed_and_says_so(fake: FakeCupti, tmp_path: Path) -> None:
    """SIGKILL skips every handler: what the library's periodic flush (every second) wrote
    before it is kept, and the summary says the process ended without its final flush."""
    out = tmp_path / "killed.perfetto-trace"
    proc = record(fake, out, fake.app, 120, 0, "crash")
    assert proc.returncode == 128 + 9, proc.stderr
    with open_trace(out) as t:
        # The 120 launches before the 1.5 s pause were flushed; the 5 after it died unflushed.
        assert t.scalar("select count(*) from slice where category = 'kernel'") == 120
        assert t.scalar("select count(*) from slice where category = 'cuda_api'") == 120
        assert metadata(t, "cupti_streams_without_counters") == 1
    assert "1 of 1 processes ended without their final flush" in proc.stderr, proc.stderr


def test_unsupported_python_is_reported(fake: FakeCupti, tmp_path: Path) -> None:
    """A CPython whose frame layout the library does not recognise (a stand-in that says 3.13
    but publishes no _Py_DebugOffsets): launch stacks keep
    their native frames, and the summary and the trace say why there are no Python frames."""
    out = tmp_path / "py313.perfetto-trace"
    proc = record(fake, out, fake.app_py313, 50, 0, "two_devices")
    assert proc.returncode == 0, proc.stderr
    assert (
        "launch stacks of 1 processes have no Python frames: CPython 3.13's frame layout was "
        "not recognised (this build reads 3.11-3.14)" in proc.stderr
    ), proc.stderr
    assert "launches without stack: 0 of 5" in proc.stderr
    with open_trace(out) as t:
        assert metadata(t, "cupti_python_unsupported_minor") == 13
    # The plain fake app is no Python process: nothing to say.
    plain = record(fake, tmp_path / "plain.perfetto-trace", fake.app, 50, 0, "two_devices")
    assert "no Python frames" not in plain.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8"},
        {
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            "OMPI_COMM_WORLD_SIZE": "8",
        },
        {"SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"},
    ],
    ids=["torchrun", "mpirun", "srun"],
)
def test_launcher_rank_names_the_process(
    fake: FakeCupti, tmp_path: Path, env: dict[str, str]
) -> None:
    """A process a launcher started reads `rank N (exe)` with its rank, local rank and world
    size as process args (from its own environment, via the stream's PROCESS chunk), and the
    trace says which host recorded it."""
    out = tmp_path / "rank.perfetto-trace"
    proc = record(fake, out, fake.app, 10, 0, extra_env=env)
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        load_views(t)
        rows = t.query(
            "select name, rank, local_rank, world_size from xpu_process "
            "where name like 'rank %' order by pid"
        )
        # The parent and its forked child inherit the same environment: same identity.
        assert rows, t.query("select pid, name from process")
        for row in rows:
            assert row == {
                "name": f"rank 3 ({fake.app.name})",
                "rank": 3,
                "local_rank": 1,
                "world_size": 8,
            }
        # Per process, the labels the view parsed, in the order written.
        labels = t.query(
            "select p.upid, group_concat(a.string_value, ' ') as labels "
            "from process p join args a using (arg_set_id) "
            f"where p.name = 'rank 3 ({fake.app.name})' group by p.upid"
        )
        assert [r["labels"] for r in labels] == ["rank=3 local_rank=1 world_size=8"] * len(rows)
        assert metadata(t, "host") == socket.gethostname()


def test_process_without_launcher_has_no_rank(app_trace) -> None:
    out, _ = app_trace
    with open_trace(out) as t:
        load_views(t)
        rows = t.query("select name, rank, local_rank, world_size from xpu_process")
        assert rows
        assert all(r["rank"] is None and r["world_size"] is None for r in rows)
        assert not any(r["name"].startswith("rank ") for r in rows)
