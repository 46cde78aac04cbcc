"""Every idle nanosecond on one chain (issue 37, item 3): each gap split along the launching
thread into the time inside the blocking call that emptied the queue, the code run after it
(samples), the time blocked (waits), the launching of the model's own work, and what nothing
covers; each part one cause with a location.  Traces from tests/chain_traces.py."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from collector import model
from collector.model import Frame, Stack
from exporters.analysis.analyze import analyze
from exporters.perfetto.engine.trace_processor import open_trace

from . import chain_traces as ct
from .analysis_traces import HOST_STACK, LOOP, PERIOD, SYNC_STACK, TORCH_DATA, _py

MODEL = f"{ct.SITE}/transformers/modeling.py"
FUNCTIONAL = f"{ct.SITE}/torch/nn/functional.py"

COPY_STACK = Stack((*LOOP, _py("handle", 30), Frame("cudaMemcpyAsync", "libcudart")))
TOKENIZE_STACK = Stack((*LOOP, _py("tokenize", 12), Frame("PyUnicode_Split", "python3.11")))
QUEUE_STACK = Stack(
    (
        *LOOP,
        _py("next_batch", 50),
        _py("get", 180, "/usr/lib/python3.11/queue.py"),
        Frame("futex_wait", "/lib/libc.so.6"),
    )
)
LOADER_STACK = Stack(
    (
        *LOOP,
        _py("__next__", 630, TORCH_DATA),
        _py("_get_data", 1130, TORCH_DATA),
        Frame("poll", "/lib/libc.so.6"),
    )
)
ATTN = _py("Attention.forward", 120, MODEL)
MLP = _py("MLP.forward", 150, MODEL)
BLOCK_ATTN = _py("Block.forward", 200, MODEL)
BLOCK_MLP = _py("Block.forward", 201, MODEL)
MODEL_LAUNCHES = [
    ct.kernel_stack(_py("train_step", 15), BLOCK_ATTN, ATTN),
    ct.kernel_stack(_py("train_step", 15), BLOCK_ATTN, ATTN),
    ct.kernel_stack(_py("train_step", 15), BLOCK_MLP, MLP),
    ct.kernel_stack(_py("train_step", 15), BLOCK_MLP, MLP),
]
# The host inside Attention.forward's launching line (Python overhead of the module).
IN_MODEL_STACK = Stack(
    (
        *LOOP,
        _py("train_step", 15),
        BLOCK_ATTN,
        ATTN,
        _py("linear", 2000, FUNCTIONAL),
        Frame("_PyEval_EvalFrameDefault", "python3.11"),
    )
)

COLUMNS = ("sync_ns", "data_ns", "host_ns", "wait_ns", "launch_ns", "other_ns")
KEYS = ("sync", "data_loading", "host_compute", "wait", "launch", "other")


def _sums(path: Path) -> tuple[dict[str, int], object]:
    with open_trace(path) as t:
        analysis = analyze(t)
        row = t.query(
            "select " + ", ".join(f"sum({c}) as {c}" for c in COLUMNS) + " from xpu_gpu_gap"
        )[0]
        dur = t.scalar("select sum(dur) from xpu_gpu_gap")
    sums = {k: int(row[c]) for k, c in zip(KEYS, COLUMNS, strict=True) if row[c]}
    assert sum(sums.values()) == dur
    return sums, analysis


def _evidence_covers(finding: object) -> None:
    assert sum(s.ns for s in finding.sites) >= 0.9 * finding.idle_ns  # type: ignore[attr-defined]


def test_sync_then_work_names_both_and_offers_both_fixes(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [
            ct.Part("block", 10_000, SYNC_STACK, "cudaStreamSynchronize"),
            ct.Part("samples", 2_000_000, HOST_STACK),
        ],
        ["sync", "host_compute"],
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    top = analysis.findings[0]
    assert top.code == "HOST_SYNC"
    assert top.locations[:2] == ["log_loss (train.py:31)", "augment (train.py:77)"]
    assert "augment (train.py:77)" in top.title and "augment (train.py:77)" in top.evidence
    assert "move augment (train.py:77) before the sync" in top.suggestion
    assert "every N steps" in top.suggestion  # drop or defer the sync
    _evidence_covers(top)


def test_needed_result_copy_then_preprocessing_names_the_preprocessing(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [
            # .cpu() of the output: an async copy of 4 MB, then a sync waiting for it
            ct.Part("block", 20_000, COPY_STACK, "cudaStreamSynchronize", copy_bytes=4 << 20),
            ct.Part("samples", 2_000_000, TOKENIZE_STACK),
        ],
        ["sync", "host_compute"],
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    top = analysis.findings[0]
    assert top.code == "HOST_SYNC"
    assert top.locations[0] == "tokenize (train.py:12)"
    assert top.title.startswith("tokenize (train.py:12)")
    assert "every N steps" not in top.suggestion and "handle (train.py:30)" in top.suggestion
    _evidence_covers(top)


def test_a_scalar_read_then_work_is_a_sync_to_defer(tmp_path: Path) -> None:
    """`.item()` (a 4-byte copy, then a sync) followed by CPU work: a value read, not a
    result the program hands on, so dropping or deferring the read is offered too."""
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [
            ct.Part("block", 20_000, COPY_STACK, "cudaStreamSynchronize", copy_bytes=4),
            ct.Part("samples", 2_000_000, TOKENIZE_STACK),
        ],
        ["sync", "host_compute"],
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    top = analysis.findings[0]
    assert top.code == "HOST_SYNC" and top.locations[0] == "handle (train.py:30)"
    assert "move tokenize (train.py:12) before the sync" in top.suggestion
    assert "every N steps" in top.suggestion


def test_host_time_nothing_covers_is_other_not_the_last_sample(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [ct.Part("samples", 1_000_000, HOST_STACK), ct.Part("nothing", 3_000_000)],
        ["host_compute", "other"],
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    assert analysis.idle.by_class["other"] > analysis.idle.by_class["host_compute"] > 0


def test_blocked_time_is_the_wait_not_the_last_sample(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [
            ct.Part("samples", 1_000_000, HOST_STACK),
            ct.Part("wait", 3_000_000, QUEUE_STACK, "futex"),
        ],
        ["host_compute", "wait"],
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    top = analysis.findings[0]
    assert top.code == "BLOCKED_WAIT"
    assert top.locations[0] == "next_batch (train.py:50)" and "futex" in top.title
    _evidence_covers(top)


GIL_STACK = Stack(
    (
        *LOOP,
        _py("train_step", 21),
        Frame("PyEval_RestoreThread", "/usr/bin/python3.11"),
        Frame("pthread_cond_timedwait", "/lib/libc.so.6"),
    )
)


def test_a_wait_for_the_gil_is_named_so(tmp_path: Path) -> None:
    """A condition wait under CPython's GIL taking (PyEval_RestoreThread: another thread
    holds the GIL) is said to be the GIL, not a bare pthread_cond_timedwait."""
    path = tmp_path / "t.pftrace"
    ct.write(
        path,
        [
            ct.Part("samples", 1_000_000, HOST_STACK),
            ct.Part("wait", 3_000_000, GIL_STACK, "pthread_cond_timedwait"),
        ],
        ["host_compute", "wait"],
    )
    _, analysis = _sums(path)
    top = analysis.findings[0]
    assert top.code == "BLOCKED_WAIT"
    assert "blocked in the GIL (held by another thread; pthread_cond_timedwait)" in top.title
    assert top.locations[0] == "train_step (train.py:21)"


def test_dataloader_wait_is_the_input_pipeline(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [
            ct.Part("samples", 1_000_000, HOST_STACK),
            ct.Part("wait", 4_000_000, LOADER_STACK, "poll"),
        ],
        ["host_compute", "data_loading"],
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    top = analysis.findings[0]
    assert top.code == "INPUT_PIPELINE"
    _evidence_covers(top)


def test_launching_the_models_own_work_is_launch_bound_at_the_module(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [ct.Part("samples", 2_000_000, IN_MODEL_STACK)],
        ["launch"],
        launch_stacks=MODEL_LAUNCHES,
    )
    sums, analysis = _sums(path)
    assert sums == chain.gap_ns
    codes = [f.code for f in analysis.findings]
    assert codes[0] == "LAUNCH_BOUND" and "PYTHON_BETWEEN_LAUNCHES" not in codes
    top = analysis.findings[0]
    assert top.locations[0] == "Attention.forward (modeling.py:120)"
    assert "off the" not in top.suggestion and "CUDA graph" in top.suggestion
    _evidence_covers(top)


# -- following a wait to what it waited for (item 2) ---------------------------------------
DATASET = Stack(
    (
        Frame("_start", "/usr/bin/python3.11"),
        _py("_worker_loop", 300, TORCH_DATA.replace("dataloader.py", "_utils/worker.py")),
        _py("fetch", 52, TORCH_DATA),
        _py("SlowDecode.__getitem__", 21),
        Frame("png_read_row", "/usr/lib/libpng.so"),
    )
)
COLLATE = Stack(
    (
        Frame("_start", "/usr/bin/python3.11"),
        _py("fetch", 54, TORCH_DATA),
        _py("default_collate", 140, TORCH_DATA),
    )
)


def _workers(n: int, every: int, cpus: bool) -> Callable[[int, int], list[model.Event]]:
    """`n` DataLoader worker processes sampled during each wait, one sample per `every`
    periods each (1: saturated), 3 in 4 of them in __getitem__."""

    def during(start: int, end: int) -> list[model.Event]:
        out: list[model.Event] = []
        for w in range(n):
            pid = 5000 + w
            k, ts = 0, start + PERIOD * every
            while ts <= end:
                stack = COLLATE if k % 4 == 3 else DATASET
                out.append(model.CpuSample(pid, pid, ts, stack, cpu=1 + w if cpus else 0))
                k, ts = k + 1, ts + PERIOD * every
        return out

    return during


def _worker_processes(n: int) -> list[model.Event]:
    out: list[model.Event] = []
    for w in range(n):
        out += [
            model.ProcessInfo(5000 + w, f"DataLoader worker {w} (python3)"),
            model.ThreadInfo(5000 + w, 5000 + w, "python3"),
        ]
    return out


def _loader_trace(path: Path, every: int, cpus: bool, stack: Stack | None) -> object:
    ct.write(
        path,
        [ct.Part("samples", 1_000_000, HOST_STACK), ct.Part("wait", 8_000_000, stack, "poll")],
        ["host_compute", "data_loading"],
        extra=_worker_processes(2),
        on_wait=_workers(2, every, cpus),
    )
    with open_trace(path) as t:
        return analyze(t)


def test_dataloader_wait_followed_to_saturated_workers(tmp_path: Path) -> None:
    analysis = _loader_trace(tmp_path / "t.pftrace", every=1, cpus=True, stack=None)
    top = analysis.findings[0]
    assert top.code == "INPUT_PIPELINE"
    assert top.locations[0] == "SlowDecode.__getitem__ (train.py:21)"
    assert "DataLoader workers too slow" in top.title and "__getitem__" in top.title
    assert "2 DataLoader worker(s) were busy 100.0%" in top.evidence
    assert "num_workers" in top.suggestion  # saturated, with CPUs to spare
    _evidence_covers(top)


def test_dataloader_wait_with_idle_workers_advises_a_cheaper_getitem(tmp_path: Path) -> None:
    analysis = _loader_trace(tmp_path / "t.pftrace", every=4, cpus=True, stack=LOADER_STACK)
    top = analysis.findings[0]
    assert top.code == "INPUT_PIPELINE"
    assert top.locations[0] == "SlowDecode.__getitem__ (train.py:21)"
    assert "num_workers" not in top.suggestion and "cheaper" in top.suggestion
    assert "busy only" in top.suggestion
    _evidence_covers(top)


PRODUCE = Stack(
    (
        Frame("_start", "/usr/bin/python3.11"),
        _py("producer_loop", 70),
        _py("produce", 9),
        Frame("memcpy", "/lib/libc.so.6"),
    )
)


def test_queue_wait_followed_to_the_producer_thread(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"

    def producer(start: int, end: int) -> list[model.Event]:
        return [
            model.CpuSample(ct.PID, 4243, ts, PRODUCE)
            for ts in range(start + PERIOD, end + 1, PERIOD)
        ]

    ct.write(
        path,
        [
            ct.Part("samples", 1_000_000, HOST_STACK),
            ct.Part("wait", 3_000_000, QUEUE_STACK, "futex"),
        ],
        ["host_compute", "wait"],
        extra=[model.ThreadInfo(ct.PID, 4243, "producer")],
        on_wait=producer,
    )
    with open_trace(path) as t:
        top = analyze(t).findings[0]
    assert top.code == "BLOCKED_WAIT"
    assert top.locations[:2] == ["next_batch (train.py:50)", "produce (train.py:9)"]
    assert "thread 'producer'" in top.title and "produce (train.py:9)" in top.suggestion


def test_sync_followed_to_the_gpu_op_it_waited_for(tmp_path: Path) -> None:
    path = tmp_path / "t.pftrace"
    ct.write(
        path,
        [
            ct.Part("block", 10_000, SYNC_STACK, "cudaStreamSynchronize"),
            ct.Part("samples", 2_000_000, HOST_STACK),
        ],
        ["sync", "host_compute"],
    )
    with open_trace(path) as t:
        top = analyze(t).findings[0]
    assert top.code == "HOST_SYNC" and "for k3 (" in top.evidence


def test_folded_idle_and_annotate_read_the_same_parts(tmp_path: Path) -> None:
    """`folded --mode idle` puts each part on its own stack (the wait on the wait's stack)
    and adds up to the idle time; `--annotate` names each gap by its cause."""
    from .conftest import run_cli

    path = tmp_path / "t.pftrace"
    chain = ct.write(
        path,
        [
            ct.Part("samples", 1_000_000, HOST_STACK),
            ct.Part("wait", 3_000_000, QUEUE_STACK, "futex"),
        ],
        ["host_compute", "wait"],
    )
    # Every gap (--span active): the default span leaves the first step's out.
    res = run_cli("folded", path, "--mode", "idle", "--span", "active", check=True)
    weights = {s: int(w) for s, w in (line.rsplit(" ", 1) for line in res.stdout.splitlines())}
    assert sum(weights.values()) == sum(chain.gap_ns.values())
    waited = [w for s, w in weights.items() if s.endswith("futex_wait;[waiting in futex]")]
    assert waited == [chain.gap_ns["wait"]]
    out = tmp_path / "annotated.pftrace"
    run_cli("report", path, "--annotate", out, "--span", "active", check=True)  # every gap
    with open_trace(out) as t:
        names = {
            r["name"]: int(r["n"])
            for r in t.query(
                "select s.name, count(*) as n from slice s join track k on k.id = s.track_id "
                "where s.category = 'xpu_perf_analysis' and k.name glob 'GPU idle*' group by 1"
            )
        }
    # Named by the cause's words and where the thread waited (the wait's own stack).
    assert names == {"blocked: next_batch (train.py:50)": chain.steps - 1}


def test_annotate_names_a_wait_for_busy_workers_at_the_workers_code(tmp_path: Path) -> None:
    """A gap the launching thread spent waiting for a batch, with nothing of its own to say
    where (no sample, no stack on the wait), is named where the finding names it: the
    workers' hot line, not the next launch's (what the user would change is there)."""
    from .conftest import run_cli

    path = tmp_path / "t.pftrace"
    analysis = _loader_trace(path, every=1, cpus=True, stack=None)
    location = analysis.findings[0].locations[0]
    assert location == "SlowDecode.__getitem__ (train.py:21)"
    out = tmp_path / "annotated.pftrace"
    run_cli("report", path, "--annotate", out, check=True)
    with open_trace(out) as t:
        names = {
            r["name"]
            for r in t.query(
                "select s.name from slice s join track k on k.id = s.track_id "
                "where s.category = 'xpu_perf_analysis' and k.name glob 'GPU idle*' "
                "and s.name glob 'data loading*'"
            )
        }
    assert names == {f"data loading: {location}"}
