"""The stack table both the CPU sampler and the waits intern their stacks in
(cupti_inject/src/stack_table.c), with the real stream.

tests/native/stack_table_check.c interns many distinct stacks (each again after the table grew
many times), identical stacks in other buffers, hashes that all start at one slot, and more
stacks than a bounded table takes; it checks the ids it is given and prints what it saw.  Here
the stream it wrote is read back: one STACK row per stack that got an id, with that id and
that stack's pcs, and no row for a stack the full table refused (those are counted instead).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from collector.inject_build import CFLAGS, SHARED_SOURCES, SOURCE_DIR
from collector.sources.cupti_stream import read_stream

REPO = Path(__file__).resolve().parent.parent
CHECK = REPO / "tests" / "native" / "stack_table_check.c"
# The library's own code-generation flags, for an executable instead of a shared object.
EXE_FLAGS = [f for f in CFLAGS if f not in ("-shared", "-fPIC", "-fvisibility=hidden")]
FULL_BIT = 0x40000000  # the bounded table's ids (stack_table_check.c's full())
MANY = 20_000


@pytest.fixture(scope="module")
def check_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    cc = shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is part of the set-up (scripts/setup.sh)"
    tmp = tmp_path_factory.mktemp("stack-table")
    exe = tmp / "stack_table_check"
    sources = [str(SOURCE_DIR / name) for name in ("stack_table.c", *SHARED_SOURCES)]
    subprocess.run(
        [
            cc,
            *EXE_FLAGS,
            "-Werror",
            f"-I{SOURCE_DIR}",
            "-o",
            str(exe),
            str(CHECK),
            *sources,
            "-ldl",
        ],
        check=True,
    )
    out = tmp / "out"
    out.mkdir()
    proc = subprocess.run(
        [str(exe), str(MANY)],
        capture_output=True,
        text=True,
        timeout=120,
        env={"XPU_PERF_OUT_DIR": str(out), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0 and proc.stdout.endswith("ok\n"), proc.stdout + proc.stderr
    (stream,) = out.glob("check-*.xpstream")
    return proc.stdout, stream


def many_pcs(k: int) -> list[int]:
    return [0x400000 + k, 0x500000 + k % 7, 0x600000]


def test_ids_are_stable_and_each_stack_written_once(check_run: tuple[str, Path]) -> None:
    stdout, path = check_run
    m = re.search(r"^many (\d+) slots (\d+)$", stdout, re.M)
    assert m and int(m.group(1)) == MANY
    # Grown from 16 slots by doubling, never past half load.
    assert int(m.group(2)) >= 2 * MANY
    stacks = read_stream(path).table("STACK")
    ids = list(stacks["stack_id"])
    product = [i for i, sid in enumerate(ids) if not sid & FULL_BIT]
    # The many stacks and the identical part's 4 distinct ones: each id once.
    assert sorted(ids[i] for i in product) == list(range(1, MANY + 5))
    rows = {ids[i]: i for i in product}
    for k in range(1, MANY + 1):
        row = rows[k]
        assert list(stacks["native_pcs"][row]) == many_pcs(k), k
        # Without an interpreter in the process a Python key has no frame: id 0, kept.
        assert list(stacks["python_frames"][row]) == [0] * (k & 1), k


def test_identical_content_is_one_stack(check_run: tuple[str, Path]) -> None:
    stdout, path = check_run
    m = re.search(r"^identical (\d+) (\d+) (\d+) (\d+) (\d+)$", stdout, re.M)
    assert m
    x, y, z, w, v = map(int, m.groups())
    assert x == y == MANY + 1 and [z, w, v] == [MANY + 2, MANY + 3, MANY + 4]
    stacks = read_stream(path).table("STACK")
    by_id = {sid: i for i, sid in enumerate(stacks["stack_id"])}
    assert list(stacks["native_pcs"][by_id[x]]) == [0x10, 0x20, 0x30]
    assert list(stacks["native_pcs"][by_id[w]]) == [0x10, 0x20]
    assert len(stacks["python_frames"][by_id[x]]) == 1
    assert len(stacks["python_frames"][by_id[v]]) == 0


def test_colliding_slots_keep_their_ids(check_run: tuple[str, Path]) -> None:
    stdout, _ = check_run
    m = re.search(r"^collisions (\d+) slots (\d+)$", stdout, re.M)
    assert m and int(m.group(1)) == 300 and int(m.group(2)) >= 600


def test_full_table_counts_what_it_refuses(check_run: tuple[str, Path]) -> None:
    stdout, path = check_run
    m = re.search(r"^full (\d+) (\d+)$", stdout, re.M)
    # 64 slots take 32 stacks; 18 more refused the first time, again the second: 36 counted.
    assert m and (int(m.group(1)), int(m.group(2))) == (32, 36)
    stacks = read_stream(path).table("STACK")
    bounded = [
        (sid & ~FULL_BIT, list(stacks["native_pcs"][i]))
        for i, sid in enumerate(stacks["stack_id"])
        if sid & FULL_BIT
    ]
    # A row per stack that got an id (and one after the reset, ids from 1 again); none for
    # the refused ones.
    assert bounded == [(k + 1, [0x900000 + k]) for k in range(32)] + [(1, [0x900000 + 40])]


def test_the_record_summary_says_what_had_no_stack() -> None:
    from collector.recording.summary import cpu_summary_lines

    counts = {"samples": 10, "stack_table_full": 3, "wait_stack_table_full": 2}
    lines = cpu_summary_lines(counts, 99)
    assert any(
        line.startswith("3 cpu samples and 2 blocked calls were kept without their stack")
        for line in lines
    ), lines
    assert not any("without their stack" in line for line in cpu_summary_lines({"samples": 1}, 99))


def test_the_sampler_library_interns_samples_and_waits_apart(tmp_path: Path) -> None:
    """In the real sampler library: the samples' stacks and the waits' stacks each in their
    own table (the waits' ids with the top bit), each STACK id written once, and both tables'
    refusals reported as counters (0 here)."""
    from collector.inject_build import build_sampler

    env = {
        "PATH": "/usr/bin:/bin",
        "LD_PRELOAD": str(build_sampler()),
        "XPU_PERF_CPU_HZ": "999",
        "XPU_PERF_CPU_OUT_DIR": str(tmp_path),
        "XPU_PERF_WAIT_THRESHOLD_US": "1",
    }
    program = "import time\nfor _ in range(20): time.sleep(0.002)\nsum(range(20_000_000))\n"
    proc = subprocess.run(
        ["/usr/bin/python3", "-c", program], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    (path,) = tmp_path.glob("cpu-*.xpstream")
    stream = read_stream(path)
    ids = list(stream.table("STACK")["stack_id"])
    assert len(ids) == len(set(ids))
    wait_ids = {i for i in stream.table("WAIT")["stack_id"] if i}
    sample_ids = {i for i in stream.table("CPU_SAMPLE")["stack_id"] if i}
    assert wait_ids and all(i & 0x80000000 for i in wait_ids)
    assert sample_ids and not any(i & 0x80000000 for i in sample_ids)
    assert wait_ids | sample_ids <= set(ids)
    counters = stream.table("COUNTER")
    last = dict(zip(counters["name"], counters["value"], strict=True))
    assert last["cpu_stack_table_full"] == 0 and last["cpu_wait_stack_table_full"] == 0
