"""Every idle nanosecond on one chain (issue 37, item 3): each gap split along the launching
thread into the time inside the blocking call that emptied the queue, the code run after it
(samples), the time blocked (waits), the launching of the model's own work, and what nothing
covers; each part one cause with a location.  Traces from tests/chain_traces.py."""

from __future__ import annotations

from pathlib import Path

from collector.model import Frame, Stack
from exporters.analysis.analyze import analyze
from exporters.perfetto.trace_processor import open_trace

from . import chain_traces as ct
from .analysis_traces import HOST_STACK, LOOP, SYNC_STACK, TORCH_DATA, _py

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
            ct.Part("block", 20_000, COPY_STACK, "cudaMemcpyAsync"),
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
