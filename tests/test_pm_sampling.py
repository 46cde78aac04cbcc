"""CUPTI PM sampling (record --gpu-metrics, cupti_inject/src/pm_sampling.c) end to end on the
fake CUPTI (tests/fake_cupti/fake_pm_sampling.c): `record` runs the fake application's
`pm_phases` (a tensor-bound phase, then a DRAM-bound one, each with one 200 ms kernel), NVML
replaced by the scripted GPU of tests/fake_nvml.py.  What is checked is read back from the
written trace: the counter tracks' values, xpu_kernel_metrics, the metadata; and the
fallbacks when PM sampling is refused."""

from __future__ import annotations

import os
import subprocess
from array import array
from pathlib import Path

import numpy as np
import pytest

from collector.gpu_metrics import catalog
from exporters.analysis import gpu_metrics
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

from .conftest import REPO
from .fake_cupti.build import FakeCupti
from .test_cupti_fake import metadata, record

FAKE_PYNVML = """
# pynvml for these tests: the scripted GPU of tests/fake_nvml.py, GPM permitted.
from collector.gpu_metrics.sampler import monotonic_ns
from tests.fake_nvml import FakeGpu, FakeNvml

_fake = FakeNvml([FakeGpu(name="Fake GPU 9000")], monotonic_ns)


def __getattr__(name):
    return getattr(_fake, name)
"""

# fake_pm_sampling.c's table: (tensor-bound phase, DRAM-bound phase).
EXPECTED = {
    catalog.SM_ACTIVE: (90.0, 60.0),
    catalog.TENSOR_ACTIVE: (80.0, 0.0),
    catalog.DRAM_BANDWIDTH: (10.0, 85.0),
    catalog.SM_OCCUPANCY: (30.0, 70.0),
    catalog.SM_ISSUE: (45.0, 20.0),
    catalog.DRAM_READ: (100.0, 2000.0),
    catalog.DRAM_WRITE: (50.0, 1000.0),
    catalog.GPC_CLOCK: (1755.0, 1755.0),
    catalog.PCIE_RX: (8.0, 8.0),
}


def record_phases(
    fake: FakeCupti, tmp_path: Path, name: str, **env: str
) -> tuple[Path, subprocess.CompletedProcess[str]]:
    bindings = tmp_path / "bindings"
    bindings.mkdir(exist_ok=True)
    (bindings / "pynvml.py").write_text(FAKE_PYNVML)
    out = tmp_path / f"{name}.perfetto-trace"
    env = {"PYTHONPATH": os.pathsep.join([str(bindings), str(REPO)]), **env}
    proc = record(
        fake, out, fake.app, 1, 0, "pm_phases", extra_env=env, flags=("--gpu-metrics", "100")
    )
    assert proc.returncode == 0, proc.stderr
    return out, proc


def tracks_of(trace, device: int = 0) -> dict[str, list[float]]:
    """Each counter track of the GPU: its values in time order."""
    out: dict[str, list[float]] = {}
    for r in trace.query(
        "select gc.metric, c.value from counter c join xpu_gpu_counter gc using (track_id) "
        f"where gc.device GLOB 'GPU {device} (*' order by c.ts"
    ):
        out.setdefault(r["metric"], []).append(r["value"])
    return out


@pytest.fixture(scope="module")
def phases(fake: FakeCupti, tmp_path_factory: pytest.TempPathFactory):
    return record_phases(fake, tmp_path_factory.mktemp("pm"), "phases")


def test_counters_read_back_the_phases_values(phases) -> None:
    """Every PM counter track holds exactly the fake's values of the two phases (and the
    idle ones); the source is PM sampling and its tracks replaced GPM's."""
    out, proc = phases
    assert "GPU metrics at 100 Hz: GPU 0 cupti_pm_sampling" in proc.stderr
    with open_trace(out) as t:
        load_views(t)
        gpu_metrics.load(t)
        tracks = tracks_of(t)
        assert metadata(t, "gpu_metrics_source") == "cupti_pm_sampling"
        assert metadata(t, "gpu_metrics_pm_clock") == "realtime"
        samples = metadata(t, "gpu_metrics_pm_samples")
        assert metadata(t, "gpu_metrics_pm_samples_dropped") == 0
        # The fake's samples are whole: none is a fragment, no image filled.
        assert metadata(t, "gpu_metrics_pm_samples_short") == 0
        assert metadata(t, "gpu_metrics_nvml_tracks_replaced") > 0
        assert metadata(t, "gpu_metrics_nvml_tracks_beside_pm") > 0
        per_kernel = {
            r["metric"] for r in t.query("select distinct metric from xpu_kernel_metrics")
        }
    for name, (tensor_phase, dram_phase) in EXPECTED.items():
        values = set(tracks[name])
        assert {tensor_phase, dram_phase} <= values, name
    # One value per sample, no GPM duplicate of the same track.
    assert len(tracks[catalog.TENSOR_ACTIVE]) == samples
    # NVML's instant counters stay (power, memory, clocks). GPM's interval counters go where
    # PM sampling read the same quantity; one it did not read (FP32 active) stays under its
    # source's name, off the interval grid xpu_kernel_metrics uses (one source per GPU).
    assert catalog.POWER in tracks and catalog.MEMORY_USED in tracks
    assert catalog.FP32_ACTIVE not in tracks
    assert f"{catalog.TENSOR_ACTIVE} (NVML)" not in tracks
    beside = f"{catalog.FP32_ACTIVE} (NVML)"
    assert tracks.get(beside), sorted(tracks)
    assert beside not in per_kernel and catalog.TENSOR_ACTIVE in per_kernel


def test_pm_sampling_cost_to_the_program_is_counted(phases) -> None:
    """The library times its PM sampling thread: the start, then its rounds' busy time (CUPTI
    calls) as a share of the time sampling ran, said in the summary and kept in the
    metadata."""
    out, proc = phases
    with open_trace(out) as t:
        busy = metadata(t, "gpu_metrics_pm_thread_busy_ns")
        start = metadata(t, "gpu_metrics_pm_start_ns")
        cpu = metadata(t, "gpu_metrics_pm_thread_cpu_ns")
        span = metadata(t, "gpu_metrics_pm_sampling_span_ns")
        first, last = t.query("select min(ts) a, max(ts + dur) b from slice")[0].values()
    # Sampling ran through the fake's two phases (a 200 ms kernel each) and no longer than
    # the recorded program did.
    assert 0.4e9 <= span <= last - first + 1e9
    assert 0 < busy < span and cpu > 0
    assert start > 0
    assert f"busy {busy / 1e6:.1f} ms of {span / 1e9:.1f} s sampled ({100 * busy / span:.2f}%)" in (
        proc.stderr
    )


def test_kernel_metrics_average_pm_counters_per_kernel(phases) -> None:
    """xpu_kernel_metrics over PM sampling's tracks: each kernel ran inside one phase, so its
    means are that phase's values exactly."""
    out, _ = phases
    with open_trace(out) as t:
        load_views(t)
        gpu_metrics.load(t)
        _, kernels = gpu_metrics.kernel_table(t, 6)
    by_name = {k["name"]: k for k in kernels}
    for i, kernel in enumerate(("tensor_kernel", "dram_kernel")):
        for name in (catalog.TENSOR_ACTIVE, catalog.DRAM_BANDWIDTH, catalog.SM_ACTIVE):
            assert by_name[kernel][name] == EXPECTED[name][i], (kernel, name)


def test_overflow_counts_the_samples_lost(fake: FakeCupti, tmp_path: Path) -> None:
    """Samples the hardware buffer lost (the fake drops 3 at every third decode) are counted
    exactly and said in the summary; the rest still read back."""
    out, proc = record_phases(fake, tmp_path, "overflow", FAKE_PM="overflow")
    lost = int(proc.stdout.split("pm samples lost ")[1].split()[0])
    assert lost > 0
    assert f"{lost} dropped (hardware buffer overflowed" in proc.stderr
    with open_trace(out) as t:
        assert metadata(t, "gpu_metrics_pm_samples_dropped") == lost
        assert metadata(t, "gpu_metrics_pm_buffer_overflows") == lost // 3
        assert metadata(t, "gpu_metrics_source") == "cupti_pm_sampling"


@pytest.mark.parametrize(
    ("scenario", "code", "words"),
    [
        ("privileges", 35, "restricted to admin users"),  # CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
        ("busy", 26, "held by another client"),  # CUPTI_ERROR_HARDWARE_BUSY
    ],
)
def test_refusal_falls_back_to_nvml_and_names_the_reason(
    fake: FakeCupti, tmp_path: Path, scenario: str, code: int, words: str
) -> None:
    """PM sampling refused (no permission; counters held by another client): the program
    runs on, GPM gives the counters, and the summary and metadata say why."""
    out, proc = record_phases(fake, tmp_path, scenario, FAKE_PM=scenario)
    assert "GPU metrics at 100 Hz: GPU 0 nvml_gpm" in proc.stderr
    refused = [line for line in proc.stderr.splitlines() if "refused: cupti_pm_sampling" in line]
    assert len(refused) == 1 and "cuptiPmSamplingEnable" in refused[0]
    assert words in refused[0]
    assert f"({code})" in refused[0]
    with open_trace(out) as t:
        load_views(t)
        gpu_metrics.load(t)
        assert metadata(t, "gpu_metrics_source") == "nvml_gpm"
        assert words in metadata(t, "gpu_metrics_refused")
        tracks = tracks_of(t)
    assert catalog.TENSOR_ACTIVE in tracks  # from GPM
    assert catalog.SM_ISSUE not in tracks and catalog.DRAM_READ not in tracks


def test_metrics_a_chip_lacks_are_named_missing(fake: FakeCupti, tmp_path: Path) -> None:
    """A chip without NVLink metrics: PM sampling runs with the rest, the two are named."""
    out, proc = record_phases(fake, tmp_path, "no_nvlink", FAKE_PM_NO_NVLINK="1")
    assert "GPU 0 cupti_pm_sampling" in proc.stderr
    with open_trace(out) as t:
        load_views(t)
        gpu_metrics.load(t)
        missing = metadata(t, "gpu_metrics_missing")
        tracks = tracks_of(t)
    assert "nvlrx__bytes.sum.per_second" in missing and "nvltx" in missing
    assert set(tracks[catalog.TENSOR_ACTIVE]) >= {0.0, 80.0}


def test_samples_outside_the_capture_window_are_dropped(fake: FakeCupti, tmp_path: Path) -> None:
    """--delay/--duration: only samples that start inside the window are kept (counted as
    outside otherwise), as NVML's are."""
    bindings = tmp_path / "bindings"
    bindings.mkdir()
    (bindings / "pynvml.py").write_text(FAKE_PYNVML)
    out = tmp_path / "window.perfetto-trace"
    env = {"PYTHONPATH": os.pathsep.join([str(bindings), str(REPO)])}
    flags = ("--gpu-metrics", "100", "--delay", "0.75", "--duration", "0.3")
    proc = record(fake, out, fake.app, 1, 0, "pm_phases", extra_env=env, flags=flags)
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        load_views(t)
        gpu_metrics.load(t)
        (window,) = t.query(
            "select ts, ts + dur as end_ts from slice where category = 'xpu_perf_window'"
        )
        outside = metadata(t, "gpu_metrics_pm_samples_outside_window")
        times = [
            r["ts"]
            for r in t.query(
                "select c.ts from counter c join xpu_gpu_counter gc using (track_id) "
                f"where gc.metric = '{catalog.SM_ISSUE}'"
            )
        ]
    assert outside > 0 and times
    # Kept to exactly the window written (the library's), not to record's own timing of
    # it, which ends tens of ms apart on a loaded machine.
    outliers = [
        (ts - window["ts"]) / 1e6 for ts in times if not window["ts"] <= ts <= window["end_ts"]
    ]
    assert not outliers, (window, outliers)


def test_samples_counted_from_rows_without_final_flush() -> None:
    """A process that died at exit never wrote its pm_* counters (the H100's first run): its
    samples are counted from its PM_SAMPLE rows, one per sample (not per metric)."""
    from collector.sources.cupti_pm_sampling import PmSampling
    from collector.sources.cupti_stream import Stream, Table

    # The columns as read_stream decodes them: fixed-width ones in arrays, texts in lists.
    tables = {
        "PM_METRIC": Table({"metric": array("I", [0, 1]), "name": ["a", "b"]}, 2),
        "PM_DEVICE": Table(
            {"device": array("I", [0]), "chip": ["GH100"], "status": ["started"], "reason": [""]},
            1,
        ),
        "PM_SAMPLE": Table(
            {
                "device": array("I", [0] * 6),
                "start": array("Q", [10, 10, 20, 20, 30, 30]),
                "end": array("Q", [20, 20, 30, 30, 40, 40]),
                "metric": array("I", [0, 1] * 3),
                "value": array("d", [0.0] * 6),
            },
            6,
        ),
        "COUNTER": Table({"name": [], "value": array("Q")}, 0),
    }
    pm = PmSampling()
    pm.add(Stream(Path("cupti-1.xpstream"), tables))
    assert pm.counts["pm_samples"] == 3


def test_phases_are_covered_by_samples(phases) -> None:
    """Sampling runs through both phases at the interval: the two 200 ms kernels are inside
    fine samples; only work before sampling started (the context's warm-up kernel) may be
    uncovered, and the summary says so only then."""
    out, proc = phases
    with open_trace(out) as t:
        work = metadata(t, "gpu_metrics_pm_work_ns")
        unsampled = metadata(t, "gpu_metrics_pm_work_unsampled_ns")
        coarse = metadata(t, "gpu_metrics_pm_work_coarse_ns")
        (warmup,) = t.query("select sum(dur) d from slice where name = 'warmup_kernel'")
    assert work >= 0.4e9
    assert coarse == 0
    assert unsampled <= warmup["d"]
    assert ("PM sampling missed" in proc.stderr) == (unsampled > 0)


def test_a_long_first_sample_is_said(fake: FakeCupti, tmp_path: Path) -> None:
    """The H200's first PM sample lasted 0.72-0.95 s whatever the interval, over the whole of
    a short program's first GPU phase: the GPU work only such a sample covers is measured
    and said, in the summary, the metadata and report's facts (not '0 dropped' alone)."""
    out, proc = record_phases(fake, tmp_path, "long_first", FAKE_PM="long_first")
    with open_trace(out) as t:
        coarse = metadata(t, "gpu_metrics_pm_work_coarse_ns")
        said = metadata(t, "gpu_metrics_pm_coverage")
        (tensor,) = t.query("select dur from slice where name = 'tensor_kernel'")
        load_views(t)
        facts = dict(gpu_metrics.source_facts(t))
    # The tensor-bound kernel (350-550 ms after the warm-up) lies inside the 900 ms sample.
    assert coarse >= tensor["dur"]
    line = next(x for x in proc.stderr.splitlines() if "PM sampling missed" in x)
    assert "only in samples far longer than the 10 ms interval" in line
    assert f"{coarse / 1e9:.3f} s only in samples" in line
    assert "GPU 0:" in said and facts["GPU counters missed"] == said


def test_coverage_of_work_by_samples() -> None:
    """PmSampling.coverage on known intervals: work before the first sample, in a gap
    between samples, and under a long sample, each measured exactly."""
    from collector.sources.cupti_pm_sampling import PmDevice, PmSampling

    pm = PmSampling(devices={0: PmDevice(started=True)})
    ms = 1_000_000
    # Samples (10 ms interval): one long [100, 400), then [400, 410) ... [490, 500), then a
    # gap, then [600, 700) in tens.
    fine = [(400 + 10 * i, 410 + 10 * i) for i in range(10)] + [
        (600 + 10 * i, 610 + 10 * i) for i in range(10)
    ]
    spans = np.array([(100, 400), *fine], np.int64) * ms
    pm._sample_spans[0] = [spans]
    # Work: [50, 150) (50 ms before sampling, 50 in the long sample), [200, 250) (long),
    # [450, 550) (50 fine, 50 in the gap), [650, 660) (fine), overlapping [655, 665).
    work = np.array([(50, 150), (200, 250), (450, 550), (650, 660), (655, 665)], np.int64) * ms
    pm.add_gpu_work(np.zeros(len(work), np.uint32), work[:, 0], work[:, 1])
    (c,) = pm.coverage(10 * ms)
    assert c.work_ns == (100 + 50 + 100 + 15) * ms
    assert c.uncovered_ns == (50 + 50) * ms
    assert c.coarse_ns == (50 + 50) * ms
    # Grouped by the gap between samples, from the first op at 50 ms: before the first
    # sample [0, 50) and in the gap [450, 500) (both 50 ms: the earlier first).
    assert c.uncovered_spans == [(0, 50 * ms), (450 * ms, 500 * ms)]
    assert c.first_sample_after_ns == 50 * ms
    assert c.longest_sample_ns == 300 * ms
    words = c.words(10 * ms)
    assert "0.100 s of GPU work had no sample (sampling started after the first GPU op)" in words
    assert "0.100 s only in samples far longer than the 10 ms interval (up to 0.30 s" in words


def test_program_ending_while_pm_sampling_starts_keeps_its_final_flush(
    fake: FakeCupti, tmp_path: Path
) -> None:
    """A trivial program ends while our thread is still starting PM sampling, inside the
    profiler's host library, which has just registered its static destructors (FAKE_PM=
    exit_race, what the H200 showed): the exit must not run them under our thread (the
    program died in std::out_of_range or SIGSEGV without its final flush, 4 runs of 4)."""
    bindings = tmp_path / "bindings"
    bindings.mkdir()
    (bindings / "pynvml.py").write_text(FAKE_PYNVML)
    out = tmp_path / "race.perfetto-trace"
    env = {
        "PYTHONPATH": os.pathsep.join([str(bindings), str(REPO)]),
        "FAKE_PM": "exit_race",
    }
    proc = record(
        fake, out, fake.app, 1, 0, "exit_in_pm_start", extra_env=env, flags=("--gpu-metrics", "100")
    )
    assert "exits with the PM start under way" in proc.stdout, proc.stdout + proc.stderr
    assert "static destructors ran" not in proc.stderr, proc.stderr
    assert "without their final flush" not in proc.stderr, proc.stderr
    assert proc.returncode == 0, proc.stderr
    with open_trace(out) as t:
        load_views(t)
        assert metadata(t, "gpu_metrics_source") == "cupti_pm_sampling"
        kernels = t.scalar("select count(*) from xpu_gpu_op where name = 'only_kernel'")
    assert kernels == 1
