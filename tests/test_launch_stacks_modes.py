"""`record --launch-stacks`: eBPF marker stacks joined to the injection library's API slices
(fake CUPTI, real eBPF), eBPF cudaLaunchKernel stacks without the library (a stand-in
libcudart), and how each mode falls back."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from collector.errors import UserError
from collector.inject_build import BuildError
from collector.recording.selection import resolve_launch_stacks
from collector.setup_check import Problem
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
from tests.native.bpf_harness import requires_bpf
from tests.native.build import build_all

from .conftest import run_cli
from .fake_cupti.build import FakeCupti, build_fake, cupti_headers
from .test_cupti_fake import LAUNCHES, metadata, record

NOT_ROOT = [Problem("not root: eBPF needs root", "run xpu-perf record with sudo")]

# Every launch-stack sample with the names of its frames, leaf first.
LAUNCH_STACK_FRAMES_SQL = """
select sample_id, group_concat(name, ';') as frames
from (select sample_id, up, name from xpu_launch_stack_frame order by sample_id, up)
group by sample_id
"""


def test_mode_resolution() -> None:
    assert resolve_launch_stacks("auto", True, []) == ("inprocess", None)
    assert resolve_launch_stacks("auto", False, []) == ("ebpf", None)
    assert resolve_launch_stacks("auto", False, NOT_ROOT) == ("off", None)
    assert resolve_launch_stacks("off", True, []) == ("off", None)
    assert resolve_launch_stacks("ebpf", True, []) == ("ebpf", None)
    mode, note = resolve_launch_stacks("ebpf", True, NOT_ROOT)
    assert mode == "inprocess"
    assert note is not None and "not root" in note and "using inprocess" in note
    assert resolve_launch_stacks("ebpf", False, NOT_ROOT)[0] == "off"
    with pytest.raises(UserError, match="needs GPU recording"):
        resolve_launch_stacks("inprocess", False, [])


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> FakeCupti:
    if cupti_headers() is None:
        pytest.fail("CUPTI headers not installed (scripts/setup.sh expects the CUDA toolkit)")
    try:
        return build_fake(tmp_path_factory.mktemp("fake_cupti"))
    except (BuildError, subprocess.CalledProcessError) as exc:
        pytest.fail(f"cannot build the fake CUPTI: {exc}")


@requires_bpf
def test_ebpf_marker_stacks_join_every_launch(fake: FakeCupti, tmp_path: Path) -> None:
    out = tmp_path / "ebpf.perfetto-trace"
    proc = record(fake, out, fake.app, LAUNCHES, 3, flags=("--launch-stacks", "ebpf"))
    assert proc.returncode == 3, proc.stderr
    assert "eBPF launch stacks:" in proc.stderr
    with open_trace(out) as t:
        load_views(t)
        launches = metadata(t, "cupti_launches")
        # Runtime, driver-only and graph launches (the forked child makes no CUDA call).
        assert launches == t.scalar(
            "select count(*) from slice where category = 'cuda_api' and (name glob "
            "'cudaLaunchKernel*' or name glob 'cuLaunchKernel*' or name glob 'cudaGraphLaunch*')"
        )
        assert launches == 2 * LAUNCHES + 10 + 1 + 5
        assert metadata(t, "cupti_launches_without_stack") == 0
        assert metadata(t, "cupti_launch_stacks_unmatched") == 0
        assert metadata(t, "cupti_ebpf_launch_lost_ringbuf_full") == 0
        assert metadata(t, "cupti_ebpf_launch_user_stack_errors") == 0
        stacks = {r["sample_id"]: r["frames"] for r in t.query(LAUNCH_STACK_FRAMES_SQL)}
        # One stack per launch (the in-process unwinder, off here, would give every API call one).
        assert len(stacks) == launches
        app_frames = ("model_forward_layer", "triton_style_launch", "worker", "main")
        assert all(any(f in s.split(";") for f in app_frames) for s in stacks.values())
        assert metadata(t, "cupti_launches_with_user_frame") == launches
        # Each stack sits on the launch's own API slice: same thread, same timestamp.
        off_slice = t.scalar(
            "select count(*) from xpu_launch_stack p where not exists (select 1 "
            "from slice s join thread_track tt on s.track_id = tt.id "
            "where tt.utid = p.utid and s.ts = p.ts and s.category = 'cuda_api')"
        )
        assert off_slice == 0
        errors = "select count(*) from stats where severity in ('error','data_loss') and value > 0"
        assert t.scalar(errors) == 0


@requires_bpf
def test_no_gpu_ebpf_probes_cuda_launch_kernel(tmp_path: Path) -> None:
    exe = build_all(tmp_path / "native")["cudart_launcher"]
    out = tmp_path / "cudart.perfetto-trace"
    n = 300
    proc = run_cli(
        "record", "--no-gpu", "--no-cpu", "--launch-stacks", "ebpf", "-o", out, "--", exe, n
    )
    assert proc.returncode == 0, proc.stderr
    assert f"eBPF launch stacks (cudaLaunchKernel/cuLaunchKernel): {n}," in proc.stderr
    with open_trace(out) as t:
        load_views(t)
        assert t.scalar("select count(*) from slice where name = 'cudaLaunchKernel'") == n
        stacks = [r["frames"].split(";") for r in t.query(LAUNCH_STACK_FRAMES_SQL)]
        assert len(stacks) == n
        # Leaf first: the probed function, then its caller (the return address the
        # frame-pointer walk would skip at function entry), then main.
        assert all(s[:3] == ["cudaLaunchKernel", "forward_layer", "main"] for s in stacks)
