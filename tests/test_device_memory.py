"""Device memory end to end without a GPU: the fake CUPTI's MEMORY2 records of known sizes
(tests/fake_cupti/fake_app.c "memory") through the injection library, `record` and the
trace: the `device memory in use` counter track per device, each allocation's size on its
API call, and the peak with the allocation sites holding it."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporters.analysis import device_memory
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

from .fake_cupti.build import FakeCupti, cupti_headers
from .test_cupti_fake import metadata, record

pytestmark = pytest.mark.skipif(cupti_headers() is None, reason="CUPTI headers not installed")

MIB = 1 << 20


@pytest.fixture(scope="module")
def memory_trace(fake: FakeCupti, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mem") / "memory.perfetto-trace"
    proc = record(fake, out, fake.app, 0, 0, "memory", flags=("--no-gpu-metrics",))
    assert proc.returncode == 0, proc.stderr
    return out


def test_memory_in_use_counter_per_device(memory_trace: Path) -> None:
    with open_trace(memory_trace) as t:
        rows = t.query(
            "select p.name as gpu, c.value from counter c join track k on k.id = c.track_id "
            "join track p on p.id = k.parent_id where k.name = 'device memory in use' "
            "order by p.name, c.ts"
        )
        assert metadata(t, "cupti_records_memory") == 3 + 4 + 2 + 1 + 1 + 2 + 3 + 1
        assert metadata(t, "cupti_memory_records_without_api") == 0
    by_gpu: dict[str, list[float]] = {}
    for r in rows:
        by_gpu.setdefault(r["gpu"], []).append(r["value"])
    gpu0 = by_gpu["GPU 0 (Fake GPU 9000)"]
    # 3 x 64 MiB, 4 x 16, two freed, 100 MiB, then everything freed in order.
    steps = [64, 128, 192, 208, 224, 240, 256, 240, 224, 324, 224, 208, 192, 128, 64, 0]
    assert gpu0 == [s * MIB for s in steps]
    assert by_gpu["GPU 1 (Fake GPU 9001)"] == [8 * MIB]


def test_allocations_carry_size_on_their_api_call(memory_trace: Path) -> None:
    with open_trace(memory_trace) as t:
        rows = t.query(
            "select s.name, extract_arg(s.arg_set_id, 'debug.memory_op') as op, "
            "extract_arg(s.arg_set_id, 'debug.bytes') as bytes, "
            "extract_arg(s.arg_set_id, 'debug.device') as device from slice s "
            "where s.category = 'cuda_api' and s.name like '%alloc%' order by s.ts"
        )
    assert [(r["name"], r["op"], r["bytes"] // MIB, r["device"]) for r in rows] == [
        *[("cudaMalloc", "alloc", 64, 0)] * 3,
        *[("cudaMalloc", "alloc", 16, 0)] * 4,
        ("cudaMalloc", "alloc", 100, 0),
        ("cudaMallocAsync", "alloc", 8, 1),
    ]


def test_peak_and_the_sites_holding_it(memory_trace: Path) -> None:
    with open_trace(memory_trace) as t:
        load_views(t)
        peaks = {p.device: p for p in device_memory.peaks(t)}
        workspace_ts = t.scalar(
            "select min(ts) from slice where name = 'cudaMalloc' "
            f"and extract_arg(arg_set_id, 'debug.bytes') = {100 * MIB}"
        )
    peak = peaks["GPU 0 (Fake GPU 9000)"]
    assert peak.bytes == 324 * MIB
    assert workspace_ts <= peak.ts  # reached inside the workspace's cudaMalloc call
    assert peak.live_allocations == 3 + 2 + 1
    sites = [(s.location.split(" ")[0], s.ns // MIB, s.count) for s in peak.sites]
    assert sites == [
        ("alloc_weights", 192, 3),
        ("alloc_workspace", 100, 1),
        ("alloc_activations", 32, 2),
    ]
    device1 = peaks["GPU 1 (Fake GPU 9001)"]
    assert device1.bytes == 8 * MIB and device1.sites[0].location.startswith("alloc_pool")


def test_report_names_the_peak_and_its_sites(memory_trace: Path) -> None:
    from exporters.report.queries import collect

    with open_trace(memory_trace) as t:
        report = collect(t, memory_trace)
    rows = {s.key: s for s in report.sections}["memory_peak"].rows
    assert rows[0]["device"] == "GPU 0 (Fake GPU 9000)" and rows[0]["peak"] == "324 MiB"
    assert [(r["site"].split(" ")[0], r["held"] // MIB) for r in rows[:3]] == [
        ("alloc_weights", 192),
        ("alloc_workspace", 100),
        ("alloc_activations", 32),
    ]


def test_release_gives_back_its_allocation_even_when_the_address_is_reused() -> None:
    import numpy as np

    from collector.sources.cupti_memory import ALLOCATION, RELEASE, release_deltas

    # Time order: A@0x10 (100), B@0x20 (50), free 0x10, C@0x10 (70, reused), free 0x30
    # (allocated before the recording), free 0x10 (C), B on device 1 at 0x10 (30), its free.
    device = np.array([0, 0, 0, 0, 0, 0, 1, 1])
    address = np.array([0x10, 0x20, 0x10, 0x10, 0x30, 0x10, 0x10, 0x10], np.uint64)
    a, r = ALLOCATION, RELEASE
    op = np.array([a, a, r, a, r, r, a, r])
    size = np.array([100, 50, 100, 70, 9, 70, 30, 30])
    assert release_deltas(device, address, op, size).tolist() == [0, 0, -100, 0, 0, -70, 0, -30]
