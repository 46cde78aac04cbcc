"""The writer's output, byte for byte: every bench input and kept stream against digests.

The writer is refactored under this test: a change that moves one byte of any trace (an
interned id, a packet's place in a chunk, a clock id, a deflate chunk boundary) fails it.
Each case writes a trace as the product does (convert: Kineto JSON through the columnar
conversion at convert's default level and at 10, and through the reference conversion
the columns are checked against (tests/kineto_reference.py, tests/test_kineto_columns.py),
its slices batched by tests/slice_batches.py; record: the CUPTI streams kept on the H100
at the default level; and a synthetic run with CPU samples, instants, renamed threads and
batches that go back in time) and compares the sha256 of the file with
tests/data/trace_digests.json.  (The metadata holds the tool's version: a version bump
changes every digest.)

Regenerate the digests only for an intended change of the output:

    .venv/bin/python tests/test_trace_bytes.py --record
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # run as a script (--record)
    sys.path.insert(0, str(REPO))

from collector import model  # noqa: E402
from exporters.perfetto.writer import (  # noqa: E402
    DEFAULT_COMPRESSION_LEVEL,
    TraceWriter,
)
from tests.slice_batches import batched, in_batches  # noqa: E402

DIGESTS = REPO / "tests/data/trace_digests.json"
# `convert --compression-level 10`, the smaller file (and 4 MiB chunks: another layout).
SMALL_FILE_LEVEL = 10
DATA = REPO / "bench/data"
# Fixed where the product takes them from the run: the command line and the clock
# snapshot are written into the trace.
COMMAND_LINE = ("xpu-perf", "golden")
SNAPSHOT = {
    pb.BUILTIN_CLOCK_BOOTTIME: 5_000_000_000,
    pb.BUILTIN_CLOCK_MONOTONIC: 4_000_000_000,
    pb.BUILTIN_CLOCK_REALTIME: 1_700_000_000_000_000_000,
}
# Every Kineto input of bench/data (~5 s together here; launch_bound_stack is half of it).
KINETO = [
    "kineto_launch_bound_stack",
    "example_kineto",
    "kineto_compute_bound",
    "kineto_cuda_graph",
    "kineto_launch_bound",
    "kineto_multi_stream",
]
STREAMS = ["cuda_graph", "launch_bound", "multi_gpu"]
SYNTHETIC_BATCH = 500


def convert(name: str, level: int) -> Callable[[Path], None]:
    """`xpu-perf convert` of bench/data/NAME.json.gz (the columnar conversion)."""

    def write(out: Path) -> None:
        from collector.commands.convert import write_trace
        from collector.sources import kineto

        src = DATA / f"{name}.json.gz"
        write_trace(src, out, list(COMMAND_LINE), kineto.ConvertStats(), compression_level=level)

    return write


def convert_reference(name: str, level: int) -> Callable[[Path], None]:
    """bench/data/NAME.json.gz through the reference conversion (tests/kineto_reference.py)."""

    def write(out: Path) -> None:
        from collector.commands.convert import summary_counters
        from collector.sources import kineto
        from tests.kineto_reference import convert_events

        src = DATA / f"{name}.json.gz"
        stats = kineto.ConvertStats()
        head = kineto.read_head(src)
        with TraceWriter(out, command_line=COMMAND_LINE, compression_level=level) as w:
            w.producer("kineto").write_all(batched(convert_events(src, head, stats)))
            for key, value in summary_counters(stats).items():
                w.set_metadata(f"convert_{key}", value)

    return write


def record(name: str) -> Callable[[Path], None]:
    """What `record` writes from a kept CUPTI stream."""

    def write(out: Path) -> None:
        from collector.sources.cupti import CuptiSource

        streams = out.parent / f"streams-{name}"
        streams.mkdir(exist_ok=True)
        link = streams / "cupti-1.xpstream"
        if not link.exists():
            # A copy: the reader takes only regular files of the directory's owner.
            shutil.copyfile(DATA / f"cupti_streams/{name}.xpstream", link)
        with TraceWriter(
            out,
            command_line=COMMAND_LINE,
            clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
            clock_snapshot=SNAPSHOT,
        ) as w:
            w.producer("cupti").write_all(CuptiSource(streams).events())

    return write


def synthetic_events() -> Iterable[model.Event]:
    """What no kept input has: CPU timer samples, instants on threads, renamed threads and
    processes, overlapping slices, float and bool args, huge ints; in batches (SYNTHETIC_BATCH
    slices each) of which some go back in time (late slices)."""
    stacks = [
        model.Stack(tuple(model.Frame(f"f{d}_{k}", "/lib/libx.so", 0x100 * d) for d in range(8)))
        for k in range(5)
    ]
    yield model.ProcessInfo(10, "app", ("app", "--x"))
    yield model.ThreadInfo(10, 11, "worker")
    yield model.GpuDevice(0, "GPU-A")
    for i in range(3000):
        ts = 1_000_000 + 700 * i - (50_000 if i % 997 == 5 else 0)
        yield model.CpuSlice(
            10,
            11 + i % 3,
            ts,
            900 if i % 5 else 0,
            f"op{i % 7}",
            "cpu_op",
            {"n": i % 4, "ratio": 0.5 * (i % 3), "flag": i % 2 == 0, "id": i, "big": 1 << 70},
            flow_ids=(model.flow_id(10, i),),
        )
        yield model.GpuOp(
            0,
            7 + i % 2,
            ts + 300,
            500 + i % 900,
            f"kern{i % 11}",
            model.CAT_KERNEL,
            {"grid_x": i % 9, "occupancy": 0.25},
            correlation_id=i,
            terminating_flow_ids=(model.flow_id(10, i),),
        )
        if i % 3 == 0:
            yield model.CpuSample(10, 11, ts + 100, stacks[i % 5], cpu=i % 4)
        if i % 250 == 0:
            yield model.Instant(10, 11, ts, "mark", "nvtx", {"step": i})
            yield model.ThreadInfo(10, 12, f"renamed{i}")


def synthetic(level: int) -> Callable[[Path], None]:
    def write(out: Path) -> None:
        with TraceWriter(
            out,
            command_line=COMMAND_LINE,
            clock_id=pb.BUILTIN_CLOCK_MONOTONIC,
            clock_snapshot=SNAPSHOT,
            sample_frequency_hz=999,
            compression_level=level,
        ) as w:
            w.producer("synthetic").write_all(in_batches(synthetic_events(), SYNTHETIC_BATCH))
            w.set_metadata("extra", "value")

    return write


CASES: dict[str, Callable[[Path], None]] = {
    **{
        f"convert/{n}/level{level}": convert(n, level)
        for n in KINETO
        for level in (DEFAULT_COMPRESSION_LEVEL, SMALL_FILE_LEVEL)
    },
    **{
        f"convert-reference/{n}/level{SMALL_FILE_LEVEL}": convert_reference(n, SMALL_FILE_LEVEL)
        for n in KINETO
    },
    f"convert-reference/example_kineto/level{DEFAULT_COMPRESSION_LEVEL}": convert_reference(
        "example_kineto", DEFAULT_COMPRESSION_LEVEL
    ),
    **{f"record/{n}/columnar": record(n) for n in STREAMS},
    f"synthetic/level{DEFAULT_COMPRESSION_LEVEL}": synthetic(DEFAULT_COMPRESSION_LEVEL),
    f"synthetic/level{SMALL_FILE_LEVEL}": synthetic(SMALL_FILE_LEVEL),
    "synthetic/level0": synthetic(0),
}


def digest(case: str, tmp: Path) -> str:
    out = tmp / (case.replace("/", "-") + ".perfetto-trace")
    CASES[case](out)
    return hashlib.sha256(out.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", sorted(CASES))
def test_trace_bytes_unchanged(tmp_path: Path, case: str) -> None:
    want = json.loads(DIGESTS.read_text())["sha256"]
    assert digest(case, tmp_path) == want[case], f"{case}: the trace's bytes changed"


def test_every_case_has_a_digest() -> None:
    assert sorted(json.loads(DIGESTS.read_text())["sha256"]) == sorted(CASES)


def main() -> int:
    import subprocess
    import tempfile
    import time

    ap = argparse.ArgumentParser(description="record the golden digests")
    ap.add_argument("--record", action="store_true", help="write tests/data/trace_digests.json")
    args = ap.parse_args()
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "exporters", "collector"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    digests = {}
    with tempfile.TemporaryDirectory() as tmp:
        for case in sorted(CASES):
            t0 = time.perf_counter()
            digests[case] = digest(case, Path(tmp))
            print(f"{case:<40} {time.perf_counter() - t0:6.2f} s  {digests[case][:16]}")
    if args.record:
        DIGESTS.parent.mkdir(exist_ok=True)
        note = f"recorded by tests/test_trace_bytes.py --record at commit {commit}"
        if dirty:
            note += " (with uncommitted changes under exporters/ or collector/)"
        DIGESTS.write_text(json.dumps({"note": note, "sha256": digests}, indent=1) + "\n")
        print(f"wrote {DIGESTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
