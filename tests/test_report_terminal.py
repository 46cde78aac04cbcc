"""The terminal report as a user reads it (issue 35): one screen of answers first, every line
within COLUMNS, no trailing spaces, the internal counters only with --all, kernel names that
tell kernels apart, the slowest steps by time; on traces of several shapes (converted
torch.profiler traces, the analysis scenarios, a 2-rank merge for --ranks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from collector.frame_names import kernel_label, kernel_labels
from exporters.report.cells import cut

from . import analysis_traces
from .conftest import REPO, run_cli
from .rank_traces import RankSpec, rank_kineto
from .view_traces import write_two_rank_run

DATA = REPO / "bench" / "data"
WIDTHS = (80, 100)
SCENARIOS = ("sync", "data", "launch_bound", "gpu_bound")


def report(*args: str | Path, columns: int) -> subprocess.CompletedProcess[str]:
    """`xpu-perf report` as a terminal of `columns` would run it (COLUMNS set)."""
    return command("report", *args, columns=columns)


def command(name: str, *args: str | Path, columns: int) -> subprocess.CompletedProcess[str]:
    """`xpu-perf NAME` as a terminal of `columns` would run it (COLUMNS set)."""
    env = dict(os.environ, COLUMNS=str(columns))
    return subprocess.run(
        [sys.executable, "-m", "collector.cli", name, *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
    )


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("terminal")
    out = {}
    for name in ("example_kineto", "kineto_launch_bound_stack", "kineto_multi_stream"):
        path = tmp / f"{name}.perfetto-trace"
        run_cli("convert", DATA / f"{name}.json.gz", "-o", path, "-q", check=True)
        out[name] = path
    for name in SCENARIOS:
        path = tmp / f"{name}.pftrace"
        analysis_traces.write(path, name, steps=20)
        out[name] = path
    return out


def _check_lines(text: str, columns: int, what: str) -> list[str]:
    lines = text.splitlines()
    assert lines, what
    for n, line in enumerate(lines, 1):
        assert len(line) <= columns, f"{what}: line {n} is {len(line)} wide: {line!r}"
        assert line == line.rstrip(), f"{what}: line {n} ends in spaces: {line!r}"
    return lines


@pytest.mark.parametrize("columns", WIDTHS)
def test_one_screen_of_answers_within_the_width(traces: dict[str, Path], columns: int) -> None:
    for name, path in traces.items():
        proc = report(path, columns=columns)
        assert proc.returncode == 0, proc.stderr
        lines = _check_lines(proc.stdout, columns, f"{name} at {columns}")
        head = [i for i, line in enumerate(lines) if line.startswith("Findings")]
        assert head and head[0] < 40, f"{name}: findings at line {head}"
        findings = [i for i, line in enumerate(lines) if line.lstrip().startswith("1. ")]
        if "none" not in lines[head[0]]:
            assert findings and findings[0] < 40, name
            # The finding's lines stay indented under its number, none at column 0.
            end = next(i for i in range(head[0] + 1, len(lines)) if not lines[i])
            assert all(line.startswith(" ") for line in lines[head[0] + 1 : end]), name
        # One span and one busy figure in the header; the recorder's counters not at all.
        header = lines[: head[0]]
        assert sum(line.startswith("GPU busy") for line in header) == 1, header
        assert sum(line.startswith("analysed") for line in header) == 1, header
        assert "writer_slices" not in proc.stdout and "convert_events_in" not in proc.stdout
        # The way on to the timeline (a path longer than the line folds over lines).
        assert f"xpu-perfview{path}" in "".join(lines[-4:]).replace(" ", "")


@pytest.mark.parametrize("columns", WIDTHS)
def test_all_tables_within_the_width(traces: dict[str, Path], columns: int) -> None:
    for name in ("example_kineto", "kineto_multi_stream", "sync"):
        proc = report(traces[name], "--all", columns=columns)
        assert proc.returncode == 0, proc.stderr
        _check_lines(proc.stdout, columns, f"{name} --all at {columns}")
    out = report(traces["example_kineto"], "--verbose", columns=100).stdout
    for title in ("Counters: drops, matches, totals", "GPU busy over time", "Memory copies"):
        assert title in out
    assert "convert_events_in" in out  # the internal counters: here, and only here


def test_kernels_read_apart(traces: dict[str, Path]) -> None:
    """Five different elementwise kernels of the example read as five names, each with the
    functor or function that tells it apart, cut in the middle where the cell is narrow."""
    out = report(traces["example_kineto"], "--all", "--top", "40", columns=200).stdout
    rows = [line for line in out.splitlines() if "vectorized_elementwise_kernel<" in line]
    names = {line.split("│")[1].strip() for line in rows}
    assert len(names) >= 5, names
    functors = ("GeluCUDAKernelImpl", "GeluBackwardCUDAKernelImpl", "BinaryFunctor<MulFunctor>")
    for functor in functors:
        assert any(functor in n for n in names), (functor, names)
    narrow = report(traces["example_kineto"], columns=80).stdout
    assert "…" in narrow and "tn_align1>" in narrow and "nn_align1>" in narrow


def test_kernel_labels() -> None:
    gelu = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl("
        "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const::"
        "{lambda()#2}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul> >(int, "
        "at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&, at::native::GeluType)::"
        "{lambda()#2}::operator()() const::{lambda()#2}::operator()() const::{lambda(float)#1}, "
        "std::array<char*, 2ul>)"
    )
    mul = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, "
        "float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >"
        "(int, at::native::BinaryFunctor<float, float, float, at::native::binary_internal::"
        "MulFunctor<float> >, std::array<char*, 3ul>)"
    )
    assert kernel_label(gelu) == "at::native::vectorized_elementwise_kernel<GeluCUDAKernelImpl>"
    assert kernel_label(mul) == (
        "at::native::vectorized_elementwise_kernel<BinaryFunctor<MulFunctor>>"
    )
    reduce = (
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
        "MeanOps<float, float, float, float>, unsigned int, float, 4, 4> >(at::native::"
        "ReduceOp<float, at::native::MeanOps<float, float, float, float>, unsigned int, float, "
        "4, 4>)"
    )
    assert kernel_label(reduce) == "at::native::reduce_kernel<ReduceOp<MeanOps>>"
    # Names without telling arguments stay as short_name reads them.
    assert kernel_label("void k<4, float>(float*)") == "k"
    assert kernel_label("gemm_bf16") == "gemm_bf16"
    # Two that differ only in a flag keep their literal arguments.
    a, b = "void r<32, true>(float*)", "void r<32, false>(float*)"
    assert kernel_labels([a, b]) == {a: "r<32, true>", b: "r<32, false>"}


def test_cut_keeps_both_ends_of_names() -> None:
    name = "at::native::vectorized_elementwise_kernel<GeluCUDAKernelImpl>"
    short = cut(name, 30, keep_end=False)
    assert len(short) == 30 and short.startswith("at::native") and short.endswith("KernelImpl>")
    assert cut("a;b;c;leaf_function", 10, keep_end=True) == "…_function"
    assert cut("short", 10, keep_end=False) == "short"


def test_slowest_steps_by_time(traces: dict[str, Path]) -> None:
    out = report(traces["kineto_launch_bound_stack"], columns=100).stdout
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("Steps"))
    assert "slowest of 50" in lines[at]
    rows = [line for line in lines[at + 4 :] if line.startswith("│ step")]
    walls = [_ns(line.split("│")[2].strip()) for line in rows]
    assert len(walls) >= 5 and walls == sorted(walls, reverse=True)


def test_warm_up_step_said_outside_the_findings(traces: dict[str, Path]) -> None:
    """The first step is listed among the steps as it ran, but the findings cover the steps
    from the second on: the table says which row lies before them, and only that one."""
    for name in ("example_kineto", "kineto_multi_stream"):
        out = report(traces[name], columns=100).stdout
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("Steps"))
        end = next(i for i in range(at, len(lines)) if lines[i].startswith("╰"))
        rows = [line.split("│")[1].strip() for line in lines[at:end] if line.startswith("│ step")]
        assert "step 1 (warm-up)" in rows, rows
        assert [r for r in rows if "warm-up" in r] == ["step 1 (warm-up)"], rows
        assert "(warm-up): before the steps the findings cover" in " ".join(lines[end + 1 :][:2])
    # --span all: the findings cover the whole trace (set-up and warm-up too), as the help
    # and the default header's hint say; no step is outside them.
    out = report(traces["example_kineto"], "--span", "all", columns=100).stdout
    assert "warm-up)" not in out
    analysed = next(line for line in out.splitlines() if line.startswith("analysed"))
    assert analysed.endswith(": the whole trace"), analysed
    span = json.loads(report(traces["example_kineto"], "--span", "all", "--format", "json",
                             columns=100).stdout)["span"]  # fmt: skip
    assert (span["focus"], span["focus_ts"], span["focus_dur_ns"]) == (
        "all",
        span["ts"],
        span["dur_ns"],
    )


def test_cut_drops_outer_scopes_of_names() -> None:
    """A qualified C++ name loses its outer scopes, whole, before its middle: five autograd
    functions of one namespace read apart."""
    name = "torch::autograd::generated::ConvolutionBackward0_apply_functional"
    assert cut(name, 60, keep_end=False, scopes=True) == (
        "…autograd::generated::ConvolutionBackward0_apply_functional"
    )
    assert cut(name, 40, keep_end=False, scopes=True) == "…ConvolutionBackward0_apply_functional"
    narrow = cut(name, 30, keep_end=False, scopes=True)
    assert len(narrow) == 30 and narrow.startswith("…Convol") and narrow.endswith("functional")
    # The `::` inside a template's arguments or a parameter list are no scopes of the name.
    kernel = "at::native::reduce_kernel<512, at::native::ReduceOp<float>>(at::native::Args)"
    assert cut(kernel, 70, keep_end=False, scopes=True) == "…" + kernel[len("at::native::") :]
    narrow = cut(kernel, 40, keep_end=False, scopes=True)
    assert len(narrow) == 40 and narrow.startswith("…reduce_k") and narrow.endswith("Args)")
    assert cut("a::b", 10, keep_end=False, scopes=True) == "a::b"
    assert cut("plain_function_name_here", 12, keep_end=False, scopes=True) == cut(
        "plain_function_name_here", 12, keep_end=False
    )


def _ns(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[unit]


@pytest.mark.parametrize("columns", WIDTHS)
def test_ranks_table_within_the_width(tmp_path: Path, columns: int) -> None:
    outs = []
    for spec in (RankSpec(0, host="node0"), RankSpec(1, host="node1", slow_us=50)):
        out = tmp_path / f"r{spec.rank}.perfetto-trace"
        run_cli("convert", rank_kineto(tmp_path / f"r{spec.rank}.json", spec), "-o", out, "-q")
        outs.append(out)
    merged = tmp_path / "merged.perfetto-trace"
    run_cli("merge", "-o", merged, *outs, "--align", "nccl", check=True)
    for args in ((merged,), tuple(outs)):
        proc = report("--ranks", *args, columns=columns)
        assert proc.returncode == 0, proc.stderr
        lines = _check_lines(proc.stdout, columns, f"--ranks {args}")
        assert any("slowest: rank 1" in line for line in lines)
        assert any("step mean" in line for line in lines[:4]) or columns < 100


@pytest.mark.parametrize("columns", WIDTHS)
def test_summaries_within_the_width(tmp_path: Path, columns: int) -> None:
    """What folded, flamegraph and convert say on stderr fits the terminal too: a two-rank
    run's span in words ('over steps 2-12 of 2 processes, the steady state...') made
    folded's line 168 columns wide."""
    run = write_two_rank_run(tmp_path / "two_ranks.perfetto-trace")
    runs = {
        "folded -o": command("folded", run.path, "-o", tmp_path / "f.folded", columns=columns),
        "folded": command("folded", run.path, "--mode", "cpu", columns=columns),
        "flamegraph": command("flamegraph", run.path, "-o", tmp_path / "f.svg", columns=columns),
        "convert": command(
            "convert", DATA / "example_kineto.json.gz", "-o", tmp_path / "ex.pftrace",
            columns=columns,
        ),
    }  # fmt: skip
    for what, proc in runs.items():
        assert proc.returncode == 0, proc.stderr
        text = proc.stderr
        if what == "convert":
            # A next command longer than the line stays whole, on a line of its own
            # (test_convert_summary.py): pasted, it runs.
            whole = ("    xpu-perf report /", "    xpu-perf view /")
            text = "\n".join(x for x in text.splitlines() if not x.startswith(whole))
        said = _check_lines(text, columns, f"{what} at {columns}")
        if what != "convert":
            # Still one sentence: the span named in full across its lines.
            text = " ".join(line.strip() for line in said)
            assert "over steps 2-12 of 2 processes, the steady state the findings cover" in text


def test_counter_values_keep_their_unit() -> None:
    """NVML's counters read with their % sign, also one the catalog does not list (a track
    name ends with its unit)."""
    from exporters.report.gpu_sections import _unit, _value

    assert _value(12.345, _unit("GPU utilization %")) == "12.3%"
    assert _value(40.0, _unit("memory controller %")) == "40.0%"
    assert _value(7.5, _unit("encoder utilization %")) == "7.5%"
    assert _value(1500.0, _unit("SM clock MHz")) == "1,500 MHz"
    assert _value(3.25, _unit("something")) == "3.25"
