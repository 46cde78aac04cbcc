"""GPU counters (record --gpu-metrics): NVML GPM and NVML's instant counters decoded from a
scripted GPU (tests/fake_nvml.py), the source chosen by what is permitted and the refusals
named, counter tracks and `xpu_kernel_metrics` read back through trace_processor."""

from __future__ import annotations

from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from collector.gpu_metrics import catalog
from collector.gpu_metrics.choice import choose
from collector.gpu_metrics.nvml_api import Nvml
from collector.gpu_metrics.nvml_readers import GpmReader
from collector.gpu_metrics.sampler import MAX_FAILED_READS, CounterSampler
from collector.recording.gpu_metrics import GpuMetricsRecording
from collector.recording.trace import write_trace
from exporters.analysis import gpu_metrics
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import batched

from .fake_nvml import (
    NVML_ERROR_IN_USE,
    NVML_ERROR_LIBRARY_NOT_FOUND,
    NVML_ERROR_NO_PERMISSION,
    FakeGpu,
    FakeNvml,
    ManualClock,
)

MS = 1_000_000
T0 = 10_000_000_000
# A GEMM phase (tensor pipes busy, DRAM quiet) then a DRAM-bound elementwise phase.
GEMM = {
    catalog.GPM_ANY_TENSOR_UTIL: 80.0,
    catalog.GPM_DRAM_BW_UTIL: 10.0,
    catalog.GPM_SM_UTIL: 95.0,
}
STREAMING = {
    catalog.GPM_ANY_TENSOR_UTIL: 0.0,
    catalog.GPM_DRAM_BW_UTIL: 90.0,
    catalog.GPM_SM_UTIL: 99.0,
}
PHASES = [(T0 + 200 * MS, T0 + 400 * MS, GEMM), (T0 + 400 * MS, T0 + 600 * MS, STREAMING)]


def sampled(gpu: FakeGpu, period_ms: int = 10, until_ms: int = 600) -> CounterSampler:
    """The sampler over one scripted GPU, ticked by hand every `period_ms` from T0."""
    clock = ManualClock(T0)
    choice = choose(None, lambda: FakeNvml([gpu], clock))
    sampler = CounterSampler(choice.devices, period_ms * MS, clock=clock)
    sampler.begin()  # the first interval opens at T0; no thread: the test ticks
    while clock.now < T0 + until_ms * MS:
        clock.now += period_ms * MS
        sampler.tick()
    return sampler


def series_of(sampler: CounterSampler) -> dict[str, model.GpuCounterSeries]:
    return {s.name: s for columns in sampler.devices for s in columns.series()}


def test_gpm_value_is_filed_at_its_interval_start() -> None:
    series = series_of(sampled(FakeGpu(phases=PHASES)))
    tensor = series[catalog.TENSOR_ACTIVE]
    values = dict(zip(tensor.ts, tensor.values, strict=True))
    # The interval [200 ms, 210 ms] is the GEMM's first: its value is at 200 ms, not 210.
    assert values[T0 + 190 * MS] == 0.0
    assert values[T0 + 200 * MS] == 80.0
    assert values[T0 + 390 * MS] == 80.0
    assert values[T0 + 400 * MS] == 0.0
    assert tensor.ts[0] == T0 and tensor.ts[-1] == T0 + 590 * MS
    # Instant counters at their reads; power in W from NVML's mW.
    assert series[catalog.POWER].values[0] == 312.5
    assert series[catalog.MEMORY_USED].ts[0] == T0 + 10 * MS
    # GPM ran: NVML's coarse utilisation is not read.
    assert catalog.GPU_UTILIZATION not in series


def write(path: Path, sampler: CounterSampler, kernels: list[tuple[str, int, int]]) -> None:
    with TraceWriter(path, clock_id=pb.BUILTIN_CLOCK_BOOTTIME) as writer:
        producer = writer.producer("test")
        producer.write(model.GpuDevice(0, "NVIDIA H100 80GB HBM3"))
        for columns in sampler.devices:
            producer.write_all(columns.series())
        producer.write_all(
            batched(
                model.GpuOp(0, 7, T0 + a * MS, (b - a) * MS, name, "kernel", {}, correlation_id=i)
                for i, (name, a, b) in enumerate(kernels)
            )
        )


def test_kernel_metrics_average_the_counters_over_each_kernel(tmp_path: Path) -> None:
    sampler = sampled(FakeGpu(phases=PHASES))
    out = tmp_path / "m.perfetto-trace"
    kernels = [
        ("gemm_bf16", 250, 350),
        ("vector_add", 450, 550),
        ("straddle", 395, 415),  # 5 ms of GEMM, 15 ms of streaming
        ("after_last_value", 700, 710),  # no counter value covers it
    ]
    write(out, sampler, kernels)
    with open_trace(out) as trace:
        load_views(trace)
        # Counter tracks under the GPU's track, read back.
        tracks = trace.query(
            "select t.name, p.name as parent from track t join track p on p.id = t.parent_id "
            "where t.id in (select track_id from counter) order by t.name"
        )
        assert {r["parent"] for r in tracks} == {"GPU 0 (NVIDIA H100 80GB HBM3)"}
        assert catalog.TENSOR_ACTIVE in {r["name"] for r in tracks}
        gpu_metrics.load(trace)
        rows = trace.query("select name, metric, value, coverage from xpu_kernel_metrics")
    got = {(r["name"], r["metric"]): (r["value"], r["coverage"]) for r in rows}
    assert got[("gemm_bf16", catalog.TENSOR_ACTIVE)] == pytest.approx((80.0, 1.0))
    assert got[("gemm_bf16", catalog.DRAM_BANDWIDTH)] == pytest.approx((10.0, 1.0))
    assert got[("vector_add", catalog.TENSOR_ACTIVE)] == pytest.approx((0.0, 1.0))
    assert got[("vector_add", catalog.DRAM_BANDWIDTH)] == pytest.approx((90.0, 1.0))
    assert got[("straddle", catalog.TENSOR_ACTIVE)] == pytest.approx((20.0, 1.0))
    assert got[("straddle", catalog.SM_ACTIVE)] == pytest.approx(((5 * 95 + 15 * 99) / 20, 1.0))
    assert not any(name == "after_last_value" for name, _ in got)


def test_report_ranks_kernels_by_tensor_use(tmp_path: Path) -> None:
    sampler = sampled(FakeGpu(phases=PHASES))
    out = tmp_path / "m.perfetto-trace"
    write(
        out, sampler, [("gemm_bf16", 210, 390), ("vector_add", 410, 590), ("vector_add", 595, 598)]
    )
    with open_trace(out) as trace:
        load_views(trace)
        metrics, rows = gpu_metrics.kernel_table(trace, top=10)
        devices = gpu_metrics.device_counters(trace)
    assert metrics[:2] == [catalog.TENSOR_ACTIVE, catalog.DRAM_BANDWIDTH]
    by_name = {r["name"]: r for r in rows}
    assert by_name["gemm_bf16"][catalog.TENSOR_ACTIVE] == pytest.approx(80.0)
    assert by_name["vector_add"][catalog.DRAM_BANDWIDTH] == pytest.approx(90.0)
    assert by_name["vector_add"]["kernels"] == 2
    tensor = next(d for d in devices if d.metric == catalog.TENSOR_ACTIVE)
    # 200 ms of 80% in 590 ms of values.
    assert tensor.mean == pytest.approx(80.0 * 200 / 590)
    assert tensor.peak == 80.0


@pytest.mark.parametrize(
    ("gpu", "init_error", "reason"),
    [
        (FakeGpu(gpm_error=NVML_ERROR_NO_PERMISSION), None, "nvml_gpm on GPU 0: no permission"),
        (FakeGpu(gpm_error=NVML_ERROR_IN_USE), None, "counters in use by another client"),
        (FakeGpu(gpm_supported=False), None, "nvml_gpm on GPU 0: not supported on this GPU"),
        (FakeGpu(), NVML_ERROR_LIBRARY_NOT_FOUND, "nvml: no NVML library"),
    ],
)
def test_refused_source_is_named(gpu: FakeGpu, init_error: int | None, reason: str) -> None:
    clock = ManualClock()
    choice = choose(None, lambda: FakeNvml([gpu], clock, init_error))
    assert any(reason in r for r in choice.refused), choice.refused
    # PM sampling's outcome is known only from the target's streams, not here.
    assert not any("cupti_pm_sampling" in r for r in choice.refused)
    if init_error is not None:
        assert choice.devices == [] and choice.source == "none"
        return
    assert choice.source == "nvml"
    sampler = CounterSampler(choice.devices, 10 * MS, clock=clock)
    for _ in range(3):
        clock.now += 10 * MS
        sampler.tick()
    series = series_of(sampler)
    # The fallback: NVML's utilisation, memory, clocks, power; no GPM counter.
    assert series[catalog.GPU_UTILIZATION].values[0] == 97.0
    assert series[catalog.MEMORY_USED].values[0] == 1 << 30
    assert catalog.TENSOR_ACTIVE not in series


def test_bindings_not_installed_is_a_reason() -> None:
    def missing() -> None:
        raise ImportError("No module named 'pynvml'")

    choice = choose(None, missing)
    assert choice.source == "none"
    assert any("nvidia-ml-py is not installed" in r for r in choice.refused)


def test_unsupported_counters_are_named_missing() -> None:
    nvlink = frozenset({catalog.GPM_NVLINK_TOTAL_RX_PER_SEC, catalog.GPM_NVLINK_TOTAL_TX_PER_SEC})
    sampler = sampled(
        FakeGpu(phases=PHASES, unsupported_metrics=nvlink, power_error=3), until_ms=50
    )
    series = series_of(sampler)
    assert catalog.NVLINK_RX not in series and catalog.POWER not in series
    assert catalog.PCIE_RX in series
    missing = sampler.devices[0].missing()
    assert missing == {
        catalog.NVLINK_RX: "not supported on this GPU",
        catalog.NVLINK_TX: "not supported on this GPU",
        catalog.POWER: "not supported on this GPU",
    }


def test_gpm_reader_refuses_a_counter_without_a_gpm_metric() -> None:
    gpu = FakeGpu(phases=PHASES)
    nvml = FakeNvml([gpu], ManualClock(T0))
    with pytest.raises(ValueError, match="GPM counters only"):
        GpmReader(nvml, gpu, (*catalog.GPM_COUNTERS, catalog.DEVICE_COUNTERS[0]))
    assert gpu.samples_taken == 0  # refused before NVML was asked for a sample


def test_nvml_protocol_names_what_pynvml_and_the_double_have() -> None:
    """nvml_api.Nvml declares the names the readers call: each one is in the real module
    and in the test double (a name misspelt in the Protocol would type-check and fail on
    a real GPU)."""
    pynvml = pytest.importorskip("pynvml")
    names = [n for n in vars(Nvml) if not n.startswith("_")]
    assert len(names) >= 20
    assert [n for n in names if not hasattr(pynvml, n)] == []
    assert [n for n in names if not hasattr(FakeNvml, n)] == []


def test_counters_taken_mid_run_stop_gpm_and_keep_what_was_read() -> None:
    # The 6th sample on is refused: another client took the counters.
    sampler = sampled(FakeGpu(phases=PHASES, gpm_error=NVML_ERROR_IN_USE, gpm_error_after=6))
    columns = sampler.devices[0]
    tensor = series_of(sampler)[catalog.TENSOR_ACTIVE]
    # Samples 0 (construction), 1 (start), 2..5 (ticks): four intervals kept.
    assert len(tensor.ts) == 4
    assert columns.read_errors == MAX_FAILED_READS
    assert columns.gpm_stopped is not None and "in use by another client" in columns.gpm_stopped
    # NVML's instant counters went on for every tick.
    assert len(series_of(sampler)[catalog.MEMORY_USED].ts) == 60


def test_visible_devices_number_gpus_as_cuda_does() -> None:
    gpus = [
        FakeGpu(name="A", uuid="GPU-aaaa0000-0000"),
        FakeGpu(name="B", uuid="GPU-bbbb0000-0000"),
        FakeGpu(name="C", uuid="GPU-cccc0000-0000"),
    ]
    clock = ManualClock()

    def names(visible: str | None) -> list[tuple[int, str]]:
        choice = choose(visible, lambda: FakeNvml(gpus, clock))
        return [(d.device, d.name) for d in choice.devices]

    assert names(None) == [(0, "A"), (1, "B"), (2, "C")]
    assert names("2,0") == [(0, "C"), (1, "A")]
    assert names("GPU-bbbb") == [(0, "B")]
    assert names("1,bogus,2") == [(0, "B")]  # CUDA stops at the first bad entry
    assert names("") == []


def test_capture_windows_keep_only_the_samples_inside() -> None:
    sampler = sampled(FakeGpu(phases=PHASES), until_ms=100)
    dropped = sampler.devices[0].keep_only([(T0 + 20 * MS, T0 + 40 * MS)])
    tensor = series_of(sampler)[catalog.TENSOR_ACTIVE]
    assert list(tensor.ts) == [T0 + 20 * MS, T0 + 30 * MS, T0 + 40 * MS]
    assert dropped == (10 - 3) + (10 - 3)  # GPM and instant columns


def test_recording_writes_source_and_refusals_to_metadata(tmp_path: Path) -> None:
    """The record-side source on its thread (real clock), through write_trace: the counter
    tracks, and what ran and what was refused in the metadata and the summary."""
    gpu = FakeGpu(gpm_error=NVML_ERROR_NO_PERMISSION)
    from collector.gpu_metrics.sampler import monotonic_ns

    recording = GpuMetricsRecording(100.0, lambda: FakeNvml([gpu], monotonic_ns))
    recording.start()
    import time

    time.sleep(0.25)
    recording.stop()
    out = tmp_path / "r.perfetto-trace"
    stats = write_trace(out, [recording], ["test"])
    assert stats["gpu_metrics"]["reads"] >= 5
    lines = recording.summary_lines()
    assert lines[0] == "GPU metrics at 100 Hz: GPU 0 nvml"
    assert any("refused: nvml_gpm on GPU 0: no permission" in line for line in lines)
    with open_trace(out) as trace:
        load_views(trace)
        meta = {
            r["key"]: r["string_value"] if r["string_value"] is not None else r["int_value"]
            for r in trace.query("select key, string_value, int_value from xpu_metadata")
        }
        used = trace.query(
            "select count(*) as n, max(c.value) as v from counter c join track t "
            f"on t.id = c.track_id where t.name = '{catalog.MEMORY_USED}'"
        )[0]
    assert meta["gpu_metrics_source"] == "nvml"
    assert "nvml_gpm on GPU 0: no permission" in meta["gpu_metrics_refused"]
    assert meta["gpu_metrics_reads"] == stats["gpu_metrics"]["reads"]
    assert used["n"] == stats["gpu_metrics"]["reads"] and used["v"] == 1 << 30


def test_report_shows_counters_kernels_and_the_source(tmp_path: Path) -> None:
    """`report` on a recorded-like trace: counters per device, kernels ranked with their
    counters, and the source and refusals from the metadata."""
    from exporters.report.queries import collect

    sampler = sampled(FakeGpu(phases=PHASES))
    out = tmp_path / "m.perfetto-trace"
    with TraceWriter(out, clock_id=pb.BUILTIN_CLOCK_BOOTTIME) as writer:
        writer.set_metadata("gpu_metrics_source", "nvml_gpm")
        writer.set_metadata("gpu_metrics_refused", PM_REFUSED)
        producer = writer.producer("test")
        producer.write(model.GpuDevice(0, "NVIDIA H100 80GB HBM3"))
        for columns in sampler.devices:
            producer.write_all(columns.series())
        producer.write_all(
            batched(
                model.GpuOp(0, 7, T0 + a * MS, 5 * MS, name, "kernel", {}, correlation_id=a)
                for a, name in [(t, "gemm_bf16") for t in range(210, 390, 10)]
                + [(t, "vector_add") for t in range(410, 590, 10)]
            )
        )
    with open_trace(out) as trace:
        report = collect(trace, out)
    facts = dict(report.facts)
    assert facts["GPU counters"] == "nvml_gpm"
    assert facts["GPU counters refused"] == PM_REFUSED
    sections = {s.key: s for s in report.sections}
    kernels = {r["name"]: r for r in sections["kernel_counters"].rows}
    column = {c.title: c.key for c in sections["kernel_counters"].columns}
    tensor, dram = column["tensor %"], column["DRAM bw %"]
    assert (kernels["gemm_bf16"][tensor], kernels["gemm_bf16"][dram]) == ("80.0%", "10.0%")
    assert (kernels["vector_add"][tensor], kernels["vector_add"][dram]) == ("0.0%", "90.0%")
    devices = {(r["device"], r["metric"]): r for r in sections["gpu_counters"].rows}
    assert devices[("GPU 0 (NVIDIA H100 80GB HBM3)", "power W")]["mean"] == "312 W"


PM_REFUSED = (
    "cupti_pm_sampling on GPU 0: cuptiPmSamplingEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (35)"
)

FAKE_PYNVML = """
# pynvml for this test: the scripted GPU of tests/fake_nvml.py, GPM refused (no permission).
from collector.gpu_metrics.sampler import monotonic_ns
from tests.fake_nvml import FakeGpu, FakeNvml

_fake = FakeNvml([FakeGpu(name="Fake GPU 9000", gpm_error={error})], monotonic_ns)


def __getattr__(name):
    return getattr(_fake, name)
"""


def test_record_names_the_refused_source(tmp_path: Path) -> None:
    """`record` end to end (fake CUPTI target, NVML bindings replaced by the double through
    PYTHONPATH): PM sampling and GPM refused (no permission for either), the counters come
    from the last fallback, and the summary and the trace's metadata say what was refused
    and why."""
    from .fake_cupti.build import build_fake, cupti_headers
    from .test_cupti_fake import metadata, record

    if cupti_headers() is None:
        pytest.skip("CUPTI headers not installed")
    fake = build_fake(tmp_path / "fake")
    bindings = tmp_path / "bindings"
    bindings.mkdir()
    (bindings / "pynvml.py").write_text(FAKE_PYNVML.format(error=NVML_ERROR_NO_PERMISSION))
    import os

    from .conftest import REPO

    env = {"PYTHONPATH": os.pathsep.join([str(bindings), str(REPO)]), "FAKE_PM": "privileges"}
    out = tmp_path / "rec.perfetto-trace"
    proc = record(fake, out, fake.app, 20, 0, "delay", extra_env=env)  # runs 2 s
    assert proc.returncode == 0, proc.stderr
    assert "xpu-perf record: GPU metrics at 10 Hz: GPU 0 nvml" in proc.stderr
    assert "GPU metrics refused: nvml_gpm on GPU 0: no permission" in proc.stderr
    assert "GPU metrics refused: cupti_pm_sampling on GPU 0: cuptiPmSamplingEnable: " in proc.stderr
    assert "(35): profiling is restricted to admin users" in proc.stderr
    with open_trace(out) as t:
        assert metadata(t, "gpu_metrics_source") == "nvml"
        assert "no permission" in metadata(t, "gpu_metrics_refused")
        tracks = {
            r["name"]
            for r in t.query(
                "select k.name from track k join track p on p.id = k.parent_id "
                "where p.name = 'GPU 0 (Fake GPU 9000)' and k.id in (select track_id from counter)"
            )
        }
    assert {catalog.GPU_UTILIZATION, catalog.MEMORY_USED, catalog.POWER} <= tracks
    assert catalog.TENSOR_ACTIVE not in tracks


def test_kept_counters_write_the_same_trace_later(tmp_path: Path) -> None:
    """The counters are kept beside the streams when the target ends, so a trace written
    later (`record --from-streams`) has them, with the same metadata and summary."""
    import time

    from collector.gpu_metrics.sampler import monotonic_ns
    from collector.recording.kept_streams import GPU_METRICS, Manifest, kept_sources

    (tmp_path / "rec" / GPU_METRICS).mkdir(parents=True)
    gpu = FakeGpu(phases=[(0, 1 << 62, GEMM)])
    recording = GpuMetricsRecording(
        100.0, lambda: FakeNvml([gpu], monotonic_ns), directory=tmp_path / "rec" / GPU_METRICS
    )
    recording.start()
    time.sleep(0.2)
    recording.stop()
    live = {s.name: s for s in recording.events() if isinstance(s, model.GpuCounterSeries)}
    sources = kept_sources(tmp_path / "rec")
    assert [s.name for s in sources] == ["gpu_metrics"]
    out = tmp_path / "later.perfetto-trace"
    write_trace(out, sources, ["test"], kept=Manifest(["test"]))
    assert sources[0].summary_lines() == recording.summary_lines()
    with open_trace(out) as trace:
        load_views(trace)
        source = trace.scalar(
            "select string_value from xpu_metadata where key = 'gpu_metrics_source'"
        )
        tensor = trace.query(
            "select count(*) as n, min(c.value) as lo from counter c join track t "
            f"on t.id = c.track_id where t.name = '{catalog.TENSOR_ACTIVE}'"
        )[0]
    assert source == "nvml_gpm"
    assert tensor["n"] == len(live[catalog.TENSOR_ACTIVE].ts) > 0
    assert tensor["lo"] == 80.0


def test_no_reads_while_the_capture_windows_are_closed() -> None:
    from types import SimpleNamespace

    clock = ManualClock(T0)
    choice = choose(None, lambda: FakeNvml([FakeGpu(phases=PHASES)], clock))
    sampler = CounterSampler(choice.devices, 10 * MS, clock=clock)
    sampler.begin()
    windows = SimpleNamespace(tree_open=False, process_windows=0)
    sampler.windows = windows
    for step in range(1, 31):
        clock.now = T0 + step * 10 * MS
        windows.process_windows = 1 if 10 <= step < 20 else 0  # open from 100 to 190 ms
        sampler.tick()
    tensor = series_of(sampler)[catalog.TENSOR_ACTIVE]
    # The first read after the window opened starts an interval; none spans closed time.
    assert list(tensor.ts) == [T0 + s * 10 * MS for s in range(10, 19)]
    assert sampler.closed_ticks == 20 and sampler.ticks == 10


def test_query_builds_kernel_metrics_when_named(tmp_path: Path) -> None:
    from .conftest import run_cli

    out = tmp_path / "m.perfetto-trace"
    write(out, sampled(FakeGpu(phases=PHASES)), [("gemm_bf16", 250, 350)])
    proc = run_cli(
        "query",
        out,
        "select name, metric, round(value, 3) as v from xpu_kernel_metrics "
        f"where metric = '{catalog.TENSOR_ACTIVE}'",
        check=True,
    )
    assert "gemm_bf16" in proc.stdout and "80.0" in proc.stdout


def test_counter_packets_are_the_bytes_upb_writes() -> None:
    """The hand-built counter packets against the same packets built as upb messages."""
    from exporters.perfetto import wire
    from exporters.perfetto.chunks import ChunkBuffer
    from exporters.perfetto.counters import write_counter_series
    from exporters.perfetto.trace_state import TraceState

    emitted: list[bytes] = []
    chunks = ChunkBuffer(lambda chunk: None, 1 << 30)
    chunks.emit_bytes = emitted.append  # type: ignore[method-assign]
    trace = TraceState(chunks, pb.BUILTIN_CLOCK_MONOTONIC, 0)
    values = [0.0, 80.5, float("nan"), 1e300, -3.25]
    times = [1, 300, 2**40, 2**62, 17]
    emitted.clear()
    written = write_counter_series(
        trace, model.GpuCounterSeries(3, catalog.TENSOR_ACTIVE, "%", times, values)
    )
    assert written == 4 and trace.counts["counter_values_skipped"] == 1
    counter_packets = emitted[-4:]  # after the GPU's and the counter track's descriptors
    track = trace.tracks.gpu_counter(3, catalog.TENSOR_ACTIVE, "%")
    for framed, ts, value in zip(
        counter_packets, [1, 300, 2**62, 17], [0.0, 80.5, 1e300, -3.25], strict=True
    ):
        pkt = pb.TracePacket(
            timestamp=ts,
            timestamp_clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
            trusted_packet_sequence_id=trace.descriptor_seq_id,
        )
        pkt.track_event.type = pb.TrackEvent.TYPE_COUNTER
        pkt.track_event.track_uuid = track
        pkt.track_event.double_counter_value = value
        assert framed == wire.frame(pkt.SerializeToString())


def test_kernels_on_interval_edges_read_only_their_interval(tmp_path: Path) -> None:
    """A kernel that starts or ends exactly at a read's time belongs to the interval on its
    side of it; one starting before the first read is covered from that read on."""
    sampler = sampled(FakeGpu(phases=PHASES))
    out = tmp_path / "m.perfetto-trace"
    write(out, sampler, [("at_edges", 200, 210), ("to_edge", 390, 400), ("before", -10, 10)])
    with open_trace(out) as trace:
        load_views(trace)
        gpu_metrics.load(trace)
        got = {
            r["name"]: (r["value"], r["coverage"])
            for r in trace.query(
                "select name, value, coverage from xpu_kernel_metrics "
                f"where metric = '{catalog.TENSOR_ACTIVE}'"
            )
        }
        pieces = trace.query(
            "select s.name, count(*) as n from _xpu_kernel_piece p join slice s using (id) "
            "group by s.name"
        )
    assert got["at_edges"] == pytest.approx((80.0, 1.0))
    assert got["to_edge"] == pytest.approx((80.0, 1.0))
    assert got["before"] == pytest.approx((0.0, 0.5))
    assert {r["name"]: r["n"] for r in pieces} == {"at_edges": 1, "to_edge": 1, "before": 1}


def test_report_counters_per_step(tmp_path: Path) -> None:
    """Marked steps over the three phases: each step's counter means."""
    from exporters.report.queries import collect

    sampler = sampled(FakeGpu(phases=PHASES))
    out = tmp_path / "m.perfetto-trace"
    with TraceWriter(out, clock_id=pb.BUILTIN_CLOCK_BOOTTIME) as writer:
        producer = writer.producer("test")
        producer.write(model.GpuDevice(0, "NVIDIA H100 80GB HBM3"))
        producer.write(model.ProcessInfo(1, "train"))
        for columns in sampler.devices:
            producer.write_all(columns.series())
        producer.write_all(
            batched(
                model.CpuSlice(1, 1, T0 + a * MS, 200 * MS, f"ProfilerStep#{i}", "user_annotation")
                for i, a in enumerate((0, 200, 400))
            )
        )
        producer.write_all(
            batched(
                model.GpuOp(0, 7, T0 + a * MS, 5 * MS, "k", "kernel", {}, correlation_id=a)
                for a in range(0, 600, 50)
            )
        )
    with open_trace(out) as trace:
        report = collect(trace, out)
    rows = {s.key: s for s in report.sections}["step_counters"].rows
    by_step = {(r["m1"], r["m2"]) for r in rows}  # tensor %, DRAM bw %
    assert by_step == {("0.0%", "0.0%"), ("80.0%", "10.0%"), ("0.0%", "90.0%")}


def test_missing_counters_are_one_summary_line_per_device_and_reason() -> None:
    """A short capture window or an older GPU leaves many counters without a value: the
    summary names them in one line per GPU and reason, not one line each."""
    nvlink = frozenset({catalog.GPM_NVLINK_TOTAL_RX_PER_SEC, catalog.GPM_NVLINK_TOTAL_TX_PER_SEC})
    gpu = FakeGpu(phases=PHASES, unsupported_metrics=nvlink, power_error=3)
    from collector.gpu_metrics.sampler import monotonic_ns

    recording = GpuMetricsRecording(100.0, lambda: FakeNvml([gpu], monotonic_ns))
    recording.start()
    import time

    time.sleep(0.2)
    recording.stop()
    missing = [line for line in recording.summary_lines() if "missing" in line]
    assert missing == [
        "GPU metrics missing on GPU 0 (not supported on this GPU): "
        f"{catalog.NVLINK_RX}, {catalog.NVLINK_TX}, {catalog.POWER}"
    ]
