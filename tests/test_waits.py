"""Blocked time: the sampler library's wrappers of the blocking libc calls (waits.c), their
stream rows, the `wait` slices and the `xpu_wait` view, end to end on this VM.

- The wrappers never change a call's result: tests/native/blocking_calls.c (timeouts, EINTR
  with and without SA_RESTART, errno, values written back) prints the same lines with the
  library recording every wait from 1 us as without it.
- `record` of a main thread blocked on a multiprocessing Queue fed by a slow process: its
  `wait` slices cover >= 90% of the time the program measured inside `.get()`, each with the
  `.get()` line in its stack; the workers' waits (fork and spawn) are in their processes.
- The fake CUDA app sleeping between launches: the sleeps are `wait` slices on the thread
  track of its API calls, and no wait stack is counted as a launch stack.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from collector import model
from collector.inject_build import build_sampler
from collector.sources.cpu_stream import InprocessCpuSource
from exporters.perfetto.engine.trace_processor import Trace, open_trace
from exporters.perfetto.engine.views import load_views

from .conftest import REPO, run_cli
from .fake_cupti.build import FakeCupti, cupti_headers

NATIVE = REPO / "tests" / "native"
# What blocking_calls.c blocks in for at least DELAY_MS (30 ms): each must be recorded.
BLOCKING = {
    "poll", "ppoll", "select", "epoll_wait", "read", "recv", "sem_wait", "sem_timedwait",
    "sem_clockwait", "pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
    "pthread_mutex_lock", "pthread_mutex_timedlock", "nanosleep", "clock_nanosleep", "usleep",
    "sleep", "waitpid", "waitid", "pthread_join",
}  # fmt: skip
# The wait's stack at entry, root first: frames' names joined by ';'.
STACK_SQL = """
with recursive chain(callsite_id, depth) as (
  select {callsite}, 0
  union all
  select c.parent_id, chain.depth + 1 from chain
  join stack_profile_callsite c on c.id = chain.callsite_id where c.parent_id is not null
)
select f.name from chain
join stack_profile_callsite c on c.id = chain.callsite_id
join stack_profile_frame f on f.id = c.frame_id
order by chain.depth desc
"""


def stack_of(t: Trace, callsite: int) -> list[str]:
    return [row["name"] for row in t.query(STACK_SQL.format(callsite=int(callsite)))]


def no_errors(t: Trace) -> None:
    bad = t.query(
        "select name, value from stats where severity in ('error', 'data_loss') and value > 0"
    )
    assert bad == [], bad


@pytest.fixture(scope="module")
def blocking_calls(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("blocking") / "blocking_calls"
    subprocess.run(
        ["gcc", "-O2", "-g", "-pthread", "-o", str(exe), str(NATIVE / "blocking_calls.c")],
        check=True,
    )
    return exe


def test_blocking_calls_give_the_same_results_under_the_library(
    blocking_calls: Path, tmp_path: Path
) -> None:
    plain = subprocess.run([blocking_calls], capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stdout + plain.stderr
    env = dict(
        os.environ,
        LD_PRELOAD=str(build_sampler()),
        XPU_PERF_CPU_HZ="999",
        XPU_PERF_CPU_OUT_DIR=str(tmp_path),
        XPU_PERF_WAIT_THRESHOLD_US="1",  # every blocking call takes the recording path
    )
    traced = subprocess.run([blocking_calls], capture_output=True, text=True, timeout=120, env=env)
    assert traced.returncode == 0, traced.stdout + traced.stderr
    assert traced.stdout == plain.stdout
    source = InprocessCpuSource(tmp_path)
    batches = [e for e in source.events() if isinstance(e, model.SliceBatch)]
    waits = [s for b in batches for s in b.slices()]
    calls = Counter(str(w.args["call"]) for w in waits)
    assert set(calls) >= BLOCKING, BLOCKING - set(calls)
    assert all(w.dur >= 1000 and w.category == model.CAT_WAIT for w in waits)
    assert source.counts["waits"] == len(waits)
    assert source.counts["waits_ring_full"] == 0
    assert source.counts["wait_threshold_ns"] == 1000


def test_every_wait_is_recorded_or_counted_lost(blocking_calls: Path, tmp_path: Path) -> None:
    """5,000 sleeps of ~55 us: a thread's ring of 128 fills between two scans (20 ms)."""
    trace = tmp_path / "burst.perfetto-trace"
    n = 5_000
    proc = run_cli(
        "record", "--no-gpu", "--wait-threshold", "1", "-o", trace, "--", blocking_calls,
        "burst", n,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lost = int(re.search(r"blocked calls of .*lost: ring_full=(\d+) ", proc.stderr)[1])
    assert lost > 0, proc.stderr
    with open_trace(trace) as t:
        load_views(t)
        no_errors(t)
        kept = t.scalar("select count(*) from xpu_wait where call = 'nanosleep'")
        assert kept + lost == n
        assert (
            t.scalar("select int_value from xpu_metadata where key = 'cpu_waits_ring_full'") == lost
        )


LOCKS_PROGRAM = """
import threading, time
lock = threading.Lock()
def holder():
    with lock:
        time.sleep(0.08)
for timeout in (-1, 2):
    t = threading.Thread(target=holder)
    t.start()
    time.sleep(0.02)
    lock.acquire(timeout=timeout)  # ACQUIRE_LINE
    lock.release()
    t.join()
"""


def interpreters() -> list:
    """This venv's CPython and the ones scripts/build_cpythons.sh built."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "xpu-perf"
    found = [sys.executable]
    for minor in ("3.13", "3.14"):
        exe = cache / "cpython" / minor / "bin" / f"python{minor}"
        if exe.is_file():
            found.append(str(exe))
    return found


@pytest.mark.parametrize("python", interpreters())
def test_cpython_lock_and_sleep_entry_points(python: str, tmp_path: Path) -> None:
    """threading.Lock.acquire reaches sem_wait (no timeout) and sem_clockwait (a timeout),
    time.sleep clock_nanosleep: each a wait of the thread, at the Python line."""
    script = tmp_path / "locks.py"
    script.write_text(LOCKS_PROGRAM)
    line = next(i for i, s in enumerate(LOCKS_PROGRAM.splitlines(), 1) if "ACQUIRE_LINE" in s)
    env = dict(
        os.environ,
        LD_PRELOAD=str(build_sampler()),
        XPU_PERF_CPU_HZ="99",
        XPU_PERF_CPU_OUT_DIR=str(tmp_path),
    )
    subprocess.run([python, script], check=True, env=env, timeout=120)
    events = list(InprocessCpuSource(tmp_path).events())
    stacks = {(e.tid, e.ts): e.stack for e in events if isinstance(e, model.WaitStack)}
    seen = Counter()
    waits = [s for b in events if isinstance(b, model.SliceBatch) for s in b.slices()]
    for e in waits:
        if isinstance(e, model.CpuSlice) and e.dur > 30e6:
            names = [f.function for f in stacks[(e.tid, e.ts)].frames]
            if f"<module> (locks.py:{line})" in names:
                seen[e.args["call"]] += 1
            elif any(n.startswith("holder (locks.py:") for n in names):
                seen[f"holder {e.args['call']}"] += 1
    assert seen == {"sem_wait": 1, "sem_clockwait": 1, "holder clock_nanosleep": 2}, seen


def test_no_waits_at_threshold_zero(blocking_calls: Path, tmp_path: Path) -> None:
    trace = tmp_path / "none.perfetto-trace"
    proc = run_cli("record", "--no-gpu", "--wait-threshold", "0", "-o", trace, "--", blocking_calls)
    assert proc.returncode == 0, proc.stderr
    assert "blocked calls: not recorded" in proc.stderr
    with open_trace(trace) as t:
        load_views(t)
        assert t.scalar("select count(*) from xpu_wait") == 0
        no_errors(t)


QUEUE_PROGRAM = """
import json, multiprocessing as mp, sys, time

def produce(q, n):
    for i in range(n):
        time.sleep(0.08)  # the slow producer
        q.put(i)

def consume(q, n, spans):
    for _ in range(n):
        t0 = time.monotonic_ns()
        q.get()  # GET_LINE
        spans.append((t0, time.monotonic_ns()))

if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    q = ctx.Queue()
    worker = ctx.Process(target=produce, args=(q, 8), name="slow producer")
    worker.start()
    spans = []
    consume(q, 8, spans)
    worker.join()
    json.dump({"pid": worker.pid, "spans": spans}, open(sys.argv[2], "w"))
"""


def covered(spans: list[tuple[int, int]], waits: list[tuple[int, int]]) -> int:
    """ns of the spans that the waits (ts, dur) cover."""
    total = 0
    for start, end in spans:
        for ts, dur in waits:
            total += max(0, min(end, ts + dur) - max(start, ts))
    return total


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_main_thread_blocked_on_a_queue(method: str, tmp_path: Path) -> None:
    script = tmp_path / "queue_wait.py"
    script.write_text(QUEUE_PROGRAM)
    get_line = next(i for i, s in enumerate(QUEUE_PROGRAM.splitlines(), 1) if "GET_LINE" in s)
    facts_path = tmp_path / "facts.json"
    trace = tmp_path / "queue.perfetto-trace"
    proc = run_cli(
        "record", "--no-gpu", "-o", trace, "--", sys.executable, script, method, facts_path
    )
    assert proc.returncode == 0, proc.stderr
    assert "blocked calls of 0.1 ms or more:" in proc.stderr
    assert "lost: ring_full=0 no_memory=0 transport=0" in proc.stderr
    facts = json.loads(facts_path.read_text())
    with open_trace(trace) as t:
        load_views(t)
        no_errors(t)
        main_pid = t.scalar(
            "select p.pid from process p join thread t using (upid) "
            "where t.tid = p.pid and p.pid != 0 and p.pid != "
            f"{facts['pid']} and p.name like '%python%' order by p.start_ts limit 1"
        )
        rows = t.query(
            "select w.ts, w.dur, w.call, w.callsite_id from xpu_wait w "
            f"join thread using (utid) where thread.tid = {main_pid} order by w.ts"
        )
        spans = [tuple(s) for s in facts["spans"]]
        blocked = sum(end - start for start, end in spans)
        in_get = [r for r in rows if any(s <= r["ts"] < e for s, e in spans)]
        share = covered(spans, [(r["ts"], r["dur"]) for r in in_get]) / blocked
        assert share >= 0.9, f"{share:.1%} of {blocked / 1e6:.0f} ms blocked in .get() covered"
        # Every wait inside a .get() names the line of that .get() in its stack.
        for row in in_get:
            assert row["callsite_id"] is not None
            frames = stack_of(t, row["callsite_id"])
            assert any(f == f"consume (queue_wait.py:{get_line})" for f in frames), frames
            assert frames[-1] == row["call"]  # the libc call is the leaf
        # The slice itself, as the shared contract writes it.
        slice_row = t.query(
            "select s.name, s.category, a.string_value as call from slice s "
            "join args a on a.arg_set_id = s.arg_set_id and a.key = 'debug.call' "
            f"where s.id = (select id from xpu_wait where ts = {in_get[0]['ts']})"
        )[0]
        assert slice_row["category"] == "wait"
        assert slice_row["name"] == f"waiting in {slice_row['call']}"
        # The slow producer (its own process, forked or spawned) waits in its sleeps.
        worker_sleeps = t.query(
            "select w.callsite_id from xpu_wait w join thread using (utid) "
            f"where thread.tid = {facts['pid']} and w.call = 'clock_nanosleep' and w.dur > 50e6"
        )
        assert len(worker_sleeps) >= 7
        assert any(
            f.startswith("produce (queue_wait.py:")
            for f in stack_of(t, worker_sleeps[0]["callsite_id"])
        )


def test_view_columns_are_the_contract(tmp_path: Path) -> None:
    trace = tmp_path / "sleep.perfetto-trace"
    proc = run_cli(
        "record",
        "--no-gpu",
        "-o",
        trace,
        "--",
        sys.executable,
        "-c",
        "import time; time.sleep(0.3)",
    )
    assert proc.returncode == 0, proc.stderr
    with open_trace(trace) as t:
        load_views(t)
        columns, rows = t.query_columns("select * from xpu_wait")
        assert columns == ["id", "ts", "dur", "utid", "call", "callsite_id"]
        sleeps = [r for r in rows if r[4] == "clock_nanosleep"]
        assert len(sleeps) == 1 and 0.29e9 <= sleeps[0][2] <= 0.5e9
        # Wait stacks are not launch stacks.
        assert t.scalar("select count(*) from xpu_launch_stack") == 0


needs_cupti_headers = pytest.mark.skipif(
    cupti_headers() is None, reason="CUPTI headers not installed"
)


@needs_cupti_headers
def test_fake_cuda_app_sleeping_between_launches(fake: FakeCupti, tmp_path: Path) -> None:
    """fake_app's `delay` phases: 20 launches, then clock_nanosleep to the next whole second."""
    trace = tmp_path / "delay.perfetto-trace"
    env = dict(os.environ, XPU_PERF_INJECT_LIB=str(fake.injection))
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "record", "-o", str(trace), "--",
         str(fake.app), "1", "0", "delay"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with open_trace(trace) as t:
        load_views(t)
        no_errors(t)
        launches = t.query(
            "select s.ts, s.dur, s.utid from xpu_thread_slice s where s.category = 'cuda_api' "
            "and s.name like '%aunch%' order by s.ts"
        )
        assert len(launches) == 60
        utid = launches[0]["utid"]
        sleeps = t.query(
            "select ts, dur, callsite_id from xpu_wait "
            f"where utid = {utid} and call = 'clock_nanosleep' order by ts"
        )
        # Two whole sleeps between the three phases (the first starts with the process).
        between = [
            w for w in sleeps
            if launches[0]["ts"] < w["ts"] and w["ts"] + w["dur"] < launches[-1]["ts"]
        ]  # fmt: skip
        assert len(between) == 2, sleeps
        assert all(w["dur"] > 0.5e9 for w in between)
        for w in between:
            frames = stack_of(t, w["callsite_id"])
            assert frames[-1] == "clock_nanosleep" and "main" in frames, frames
            # No launch inside a sleep.
            assert not any(w["ts"] < a["ts"] < w["ts"] + w["dur"] for a in launches)
        # Each API call's launch stack is still one launch stack; waits add none.
        api_calls = t.scalar("select count(*) from xpu_thread_slice where category = 'cuda_api'")
        assert t.scalar("select count(*) from xpu_launch_stack") <= api_calls
        assert (
            t.scalar(
                "select count(*) from xpu_launch_stack ls join xpu_wait w "
                "on w.utid = ls.utid and w.ts = ls.ts"
            )
            == 0
        )
        waits = t.scalar("select count(*) from xpu_wait")
        assert t.scalar("select count(callsite_id) from xpu_wait") == waits  # all with a stack
        launch_stacks = t.scalar("select count(*) from xpu_launch_stack")
    # merge keeps each wait with its stack and each launch stack apart (it adds up to 999 to
    # a stack's process_priority).
    merged = tmp_path / "merged.perfetto-trace"
    proc = run_cli("merge", trace, trace, "-o", merged)
    assert proc.returncode == 0, proc.stderr
    with open_trace(merged) as t:
        load_views(t)
        no_errors(t)
        assert t.scalar("select count(*) from xpu_wait") == 2 * waits
        assert t.scalar("select count(callsite_id) from xpu_wait") == 2 * waits
        assert t.scalar("select count(*) from xpu_launch_stack") == 2 * launch_stacks
