"""`report --ranks` over several traces names each by the shortest end of its path that
tells it from the others (the file name; `dir/name` where two files share a name), not by
its whole path: the column read `/tmp/…` cut in the middle, or took the line's width."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from exporters.report.cells import distinct_tails

from .conftest import REPO, run_cli
from .rank_traces import RankSpec, rank_kineto


def test_distinct_tails() -> None:
    assert distinct_tails(["/a/x/run.pt", "/b/x/run.pt", "/c/other.pt"]) == {
        "/a/x/run.pt": "a/x/run.pt",
        "/b/x/run.pt": "b/x/run.pt",
        "/c/other.pt": "other.pt",
    }
    assert distinct_tails(["n0/run.pt", "n1/run.pt", "n1/r.pt"]) == {
        "n0/run.pt": "n0/run.pt",
        "n1/run.pt": "n1/run.pt",
        "n1/r.pt": "r.pt",
    }
    # One path the end of another: the shorter stays whole, the longer grows past it.
    assert distinct_tails(["run.pt", "/w/run.pt"]) == {"run.pt": "run.pt", "/w/run.pt": "w/run.pt"}
    assert distinct_tails(["/only/one.pt"]) == {"/only/one.pt": "one.pt"}
    assert distinct_tails([]) == {}
    many = [f"/d{i % 3}/e{i % 2}/run.pt" for i in range(6)]
    labels = distinct_tails(many)
    assert len(set(labels.values())) == len(set(many))
    assert all(p.endswith(label) for p, label in labels.items())


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two nodes' traces of one name, in their own directories, and a third elsewhere."""
    tmp = tmp_path_factory.mktemp("ranks_names")
    outs = []
    for spec, rel in (
        (RankSpec(0, 3, host="node0"), "east/run.perfetto-trace"),
        (RankSpec(1, 3, host="node1", slow_us=50), "west/run.perfetto-trace"),
        (RankSpec(2, 3, host="node2"), "extra/rank2.perfetto-trace"),
    ):
        out = tmp / "a-long-results-directory" / rel
        out.parent.mkdir(parents=True)
        src = rank_kineto(tmp / f"r{spec.rank}.json", spec)
        run_cli("convert", src, "-o", out, "-q", check=True)
        outs.append(out)
    return outs


@pytest.mark.parametrize("columns", [80, 100])
def test_batch_table_names_traces_by_their_distinct_ends(traces: list[Path], columns: int) -> None:
    env = {**os.environ, "COLUMNS": str(columns)}
    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", "report", "--ranks", *map(str, traces)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=600,
        check=True,
    )
    for line in proc.stdout.splitlines():
        assert len(line) <= columns, (len(line), line)
    table, slowest = proc.stdout.split("slowest:")
    assert " ".join(slowest.split()).startswith("rank 1 (west/run, node1, pid 4242)"), slowest
    assert "a-long-results-directory" not in table
    assert str(traces[0].parent.parent.parent) not in table
    rows = [line for line in table.splitlines() if "node" in line and "│" in line]
    assert len(rows) == 3, table
    if columns >= 100:
        for label in ("east/run", "west/run", "rank2"):
            assert sum(f"│ {label} " in line for line in rows) == 1, (label, table)
        assert "trace = the end of its path, without .perfetto-trace" in " ".join(table.split())
    else:
        # Cut in the middle where narrow, the directory that tells them apart still reads.
        assert [("east" in r, "west" in r, "rank2" in r) for r in rows] == [
            (True, False, False),
            (False, True, False),
            (False, False, True),
        ], table
