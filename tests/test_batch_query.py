"""`xpu-perf query TRACE... SQL`: one query over many traces, on the local process pool and
on a real Dask cluster, gives the rows of the single queries with the trace in front; a bad
trace is one error line while the others still print."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pytest

from collector import model
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
from exporters.perfetto.writer import TraceWriter
from tests.slice_batches import as_batch

from .conftest import run_cli

TRACES = 20
SQL = (
    "select p.rank, p.world_size, g.name, count(*) as n, sum(g.dur) as dur "
    "from xpu_gpu_op g, xpu_process p group by g.name order by g.name"
)


def write_rank_trace(path: Path, rank: int) -> Path:
    """A small trace of one rank of a TRACES-rank job: rank + 1 kernels, names cycling."""
    with TraceWriter(path) as w:
        p = w.producer("test")
        p.write(model.ranked_process(100 + rank, "python", rank=rank, world_size=TRACES))
        p.write(model.ThreadInfo(100 + rank, 100 + rank, "main"))
        p.write(model.GpuDevice(0, "Test GPU"))
        ops = [
            model.GpuOp(0, 7, 1000 * i, 10 + rank, f"k{i % 3}", model.CAT_KERNEL)
            for i in range(rank + 1)
        ]
        p.write(as_batch(ops))
    return path


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    d = tmp_path_factory.mktemp("ranks")
    return [write_rank_trace(d / f"r{r:02d}.perfetto-trace", r) for r in range(TRACES)]


@pytest.fixture(scope="module")
def single_rows(traces: list[Path]) -> list[dict]:
    """What 20 single queries give, each row with its trace in front."""
    rows: list[dict] = []
    for path in traces:
        with open_trace(path) as t:
            load_views(t)
            rows.extend({"trace": str(path), **r} for r in t.query(SQL))
    return rows


def test_single_queries_see_the_ranks(single_rows: list[dict]) -> None:
    assert len(single_rows) == 1 + 2 + 3 * (TRACES - 2)  # rank 0 has 1 name, rank 1 has 2
    assert {r["rank"] for r in single_rows} == set(range(TRACES))
    assert {r["world_size"] for r in single_rows} == {TRACES}


def test_process_pool_gives_the_single_queries_rows(
    traces: list[Path], single_rows: list[dict]
) -> None:
    proc = run_cli("query", *traces, SQL, "--format", "json", "--jobs", "2", check=True)
    assert json.loads(proc.stdout) == single_rows


def test_directory_and_glob_name_the_same_batch(
    traces: list[Path], single_rows: list[dict]
) -> None:
    d = traces[0].parent
    by_dir = run_cli("query", d, SQL, "--format", "csv", check=True)
    rows = list(csv.reader(io.StringIO(by_dir.stdout)))
    assert rows[0] == ["trace", "rank", "world_size", "name", "n", "dur"]
    assert [r[0] for r in rows[1:]] == [r["trace"] for r in single_rows]
    by_glob = run_cli("query", f"{d}/r1*.perfetto-trace", SQL, "--format", "csv", check=True)
    names = {r.split(",")[0] for r in by_glob.stdout.splitlines()[1:]}
    assert names == {str(d / f"r{r}.perfetto-trace") for r in range(10, 20)}
    table = run_cli("query", d, "select count(*) as n from xpu_gpu_op", check=True)
    assert "trace" in table.stdout.splitlines()[1] and "r19.perfetto-trace" in table.stdout


def test_dask_cluster_gives_the_single_queries_rows(
    traces: list[Path], single_rows: list[dict]
) -> None:
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        proc = run_cli(
            "query",
            *traces,
            SQL,
            "--format",
            "json",
            "--scheduler",
            cluster.scheduler_address,
            check=True,
        )
    assert json.loads(proc.stdout) == single_rows


def test_bad_trace_is_one_line_and_the_others_print(traces: list[Path], tmp_path: Path) -> None:
    bad = tmp_path / "bad.perfetto-trace"
    bad.write_bytes(b"not a trace at all")
    missing = tmp_path / "missing.perfetto-trace"
    proc = run_cli("query", traces[0], bad, traces[1], missing, SQL, "--format", "json")
    assert proc.returncode != 0
    assert {r["trace"] for r in json.loads(proc.stdout)} == {str(traces[0]), str(traces[1])}
    lines = proc.stderr.splitlines()
    assert len(lines) == 2, proc.stderr
    assert lines[0].startswith(f"xpu-perf query: error: {bad}: ")
    assert lines[1].startswith(f"xpu-perf query: error: {missing}: ")
    assert "Traceback" not in proc.stderr


def test_bad_arguments_are_one_line(tmp_path: Path) -> None:
    empty = run_cli("query", tmp_path, "select 1")
    assert empty.returncode == 2 and "no trace files" in empty.stderr
    assert empty.stderr.count("\n") == 1
    nomatch = run_cli("query", f"{tmp_path}/*.perfetto-trace", "select 1")
    assert nomatch.returncode == 2 and "no file matches" in nomatch.stderr
    jobs = run_cli("query", tmp_path, tmp_path, "select 1", "--jobs", "0")
    assert jobs.returncode == 2 and "--jobs" in jobs.stderr
    nosql = run_cli("query", tmp_path / "x.perfetto-trace")
    assert nosql.returncode == 2 and "give the SQL" in nosql.stderr


def test_closing_a_trace_frees_the_engine(traces: list[Path]) -> None:
    """A batch worker opens trace after trace: each close must give the embedded engine's
    memory back (it kept ~30 MB per trace before: a reference cycle through wasmtime)."""
    import gc

    def resident_mb() -> float:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    sizes = []
    for _ in range(6):
        with open_trace(traces[0]) as t:
            t.query("select count(*) from slice")
        gc.collect()
        sizes.append(resident_mb())
    assert sizes[-1] - sizes[0] < 30, sizes
