"""The second look (issue 24): answers kept per statement, never stale, never from a file
someone else could have put there, and the same output as a look that loads the trace."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from exporters.analysis.idle_stacks import fold_mode
from exporters.perfetto.engine import result_cache
from exporters.perfetto.engine.cached_trace import CachedTrace, open_cached
from exporters.perfetto.engine.trace_processor import QueryError, Trace, open_trace
from exporters.perfetto.engine.views import load_views

from .cache_attacks import LOOSENED, loosen
from .conftest import run_cli
from .trace_rewrite import rewrite_in_place

SQL = "select name, count(*) as n, sum(dur) as total from xpu_gpu_op group by 1 order by 3 desc"


@pytest.fixture()
def trace(example_trace: Path, tmp_path: Path) -> Path:
    """A copy of the converted example: each test changes its own file."""
    path = tmp_path / "t.perfetto-trace"
    shutil.copy(example_trace, path)
    return path


def _look(path: Path, root: Path) -> tuple[list[dict[str, object]], str, bool]:
    """One look as the commands make it: the views, a query, the folded GPU stacks."""
    with open_cached(path, root=root) as t:
        load_views(t)
        rows = t.query(SQL)
        folded = fold_mode(t, "gpu", "ns", None).render()
        loaded = t.engine_loaded if isinstance(t, CachedTrace) else True
    return rows, folded, loaded


def test_second_look_loads_nothing_and_answers_the_same(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    first = _look(trace, root)
    second = _look(trace, root)
    assert first[2] is True and second[2] is False
    with open_trace(trace) as t:  # the engine itself, no store in between
        load_views(t)
        expected = (t.query(SQL), fold_mode(t, "gpu", "ns", None).render())
    assert first[:2] == second[:2] == expected
    assert expected[0] and expected[1]  # something was compared


def test_errors_are_raised_again_and_never_kept(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    messages = []
    for _ in range(2):
        with open_cached(trace, root=root) as t:
            with pytest.raises(QueryError) as err:
                t.query("select nope from slice")
            messages.append(str(err.value))
            assert isinstance(t, CachedTrace) and t.engine_loaded  # the engine said it again
            assert t.scalar("select count(*) from slice") > 0
    assert messages[0] == messages[1] and "nope" in messages[0]


def test_a_new_statement_after_kept_ones_loads_and_replays(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    with open_cached(trace, root=root) as t:
        load_views(t)
    with open_cached(trace, root=root) as t:
        assert isinstance(t, CachedTrace)
        load_views(t)
        assert not t.engine_loaded
        # Needs the views the kept statements made: they are run again on the engine.
        n = t.scalar("select count(*) from xpu_gpu_op")
        assert t.engine_loaded
    with open_trace(trace) as t:
        load_views(t)
        assert n == t.scalar("select count(*) from xpu_gpu_op") > 0


def test_a_changed_trace_is_never_answered_from_its_old_answers(
    trace: Path, tmp_path: Path
) -> None:
    root = tmp_path / "results"
    before = _look(trace, root)
    other = rewrite_in_place(trace, tmp_path)
    after = _look(trace, root)
    assert after[2] is True  # loaded again
    with open_trace(other) as t:
        load_views(t)
        assert after[0] == t.query(SQL) != before[0]


def test_trace_key_follows_contents_and_identity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"a" * 4096)
    key = result_cache.trace_key(path)
    assert result_cache.trace_key(path) == key
    st = path.stat()
    with path.open("r+b") as f:  # one byte in the middle, same size, mtime set back
        f.seek(2048)
        f.write(b"b")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    changed = result_cache.trace_key(path)
    assert changed != key
    # Above the full-hash size only head and tail are hashed: ctime still tells.
    monkeypatch.setattr(result_cache, "FULL_HASH_BYTES", 1024)
    monkeypatch.setattr(result_cache, "_EDGE_BYTES", 512)
    edges = result_cache.trace_key(path)
    with path.open("r+b") as f:
        f.seek(2048)
        f.write(b"c")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert result_cache.trace_key(path) != edges


def _kept_files(root: Path) -> list[Path]:
    return sorted(root.glob("*/*.json"))


def test_store_is_private(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    _look(trace, root)
    files = _kept_files(root)
    assert files
    assert {f.stat().st_mode & 0o777 for f in files} == {0o600}
    assert {d.stat().st_mode & 0o777 for d in (root, files[0].parent)} == {0o700}
    assert {f.stat().st_uid for f in files} == {os.geteuid()}


@pytest.mark.parametrize("where", ["root", "trace dir"])
def test_a_directory_open_to_others_turns_the_store_off(
    trace: Path, tmp_path: Path, where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    _look(trace, root)
    (root if where == "root" else _kept_files(root)[0].parent).chmod(0o777)
    rows, _, loaded = _look(trace, root)
    assert loaded  # nothing was read from it
    assert "not using the cached query results" in capsys.readouterr().err
    with open_trace(trace) as t:
        load_views(t)
        assert rows == t.query(SQL)


def _poison(files: list[Path]) -> None:
    """What a planted answer would say: every kept query answers one fake row."""
    for f in files:
        doc = json.loads(f.read_text())
        if isinstance(doc["rows"], dict) and doc["rows"]["columns"]:
            doc["rows"]["rows"] = [["planted"] * len(doc["rows"]["columns"])]
        f.write_text(json.dumps(doc))


@pytest.mark.parametrize("attack", ["symlink", "group readable", "other owner", "wrong key"])
def test_a_planted_or_loose_answer_is_never_used(trace: Path, tmp_path: Path, attack: str) -> None:
    if attack == "other owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    root = tmp_path / "results"
    expected = _look(trace, root)
    files = _kept_files(root)
    elsewhere = tmp_path / "planted"
    elsewhere.mkdir()
    for f in files:
        if attack in LOOSENED:
            loosen(f, attack, elsewhere)
        else:  # an answer renamed to another statement's name
            doc = json.loads(f.read_text())
            doc["key"] = "0" * 40
            f.write_text(json.dumps(doc))
    _poison(list(elsewhere.iterdir()) if attack == "symlink" else files)
    planted = {p: p.read_bytes() for p in elsewhere.iterdir()}
    got = _look(trace, root)
    assert got[2] is True  # every statement missed: the engine answered
    assert got[:2] == expected[:2]
    if attack == "symlink":  # replaced by a file of ours, never written through
        assert all(not f.is_symlink() for f in _kept_files(root))
        assert planted and {p: p.read_bytes() for p in elsewhere.iterdir()} == planted


def test_no_cache_switch(trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(result_cache.ENV_DISABLE, "1")
    with open_cached(trace, root=tmp_path / "results") as t:
        assert type(t) is Trace
    assert not (tmp_path / "results").exists()


def test_prune_keeps_the_latest(tmp_path: Path) -> None:
    for i in range(5):
        d = tmp_path / f"t{i}"
        d.mkdir()
        os.utime(d, ns=(i * 10**9, i * 10**9))
    result_cache.prune(tmp_path, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t3", "t4"]


@pytest.mark.parametrize(
    "command",
    [
        ["report", "--format", "json"],
        ["folded", "--mode", "merge"],
        ["query", "select name, dur from slice order by dur desc, name limit 20"],
    ],
)
def test_cli_output_is_the_same_cached_and_not(trace: Path, command: list[str]) -> None:
    if command[0] == "query":
        args: list[str | Path] = ["query", trace, command[1], "--format", "json"]
    else:
        args = [command[0], trace, *command[1:]]
    plain = run_cli(*args, "--no-cache", check=True).stdout
    first = run_cli(*args, check=True).stdout
    second = run_cli(*args, check=True).stdout
    assert plain == first == second
    assert plain.strip()


def test_an_engine_failure_is_not_kept(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of memory is about this run's heap, not the statement: the next look asks again."""
    from exporters.perfetto.engine import wasm_engine

    root = tmp_path / "results"
    pairs = "create perfetto table pairs as select a.id as a, b.id as b from slice a, slice b"
    with open_trace(trace) as t:
        loaded = t.engine_heap_bytes()
    assert loaded is not None
    monkeypatch.setenv(wasm_engine.ENV_HEAP_MB, str(loaded // 2**20 + 8))
    with open_cached(trace, root=root) as t, pytest.raises(QueryError):
        t.execute(pairs)
    monkeypatch.delenv(wasm_engine.ENV_HEAP_MB)
    with open_cached(trace, root=root) as t:
        t.execute(pairs)
        assert t.scalar("select count(*) from pairs") > 1000**2


def test_flamegraph_is_the_same_cached_and_not(trace: Path, tmp_path: Path) -> None:
    svgs = []
    for i, flags in enumerate((["--no-cache"], [], [])):
        out = tmp_path / f"{i}.svg"
        run_cli("flamegraph", trace, "--mode", "gpu", "-o", out, *flags, check=True)
        svgs.append(out.read_bytes())
    assert svgs[0] == svgs[1] == svgs[2]
    assert b"<svg" in svgs[0]


def _two_array_looks(
    trace: Path, root: Path, sql: str
) -> tuple[list[tuple[dict[str, list[Any]], bool]], dict[str, list[Any]], list[tuple[Any, ...]]]:
    """Two cached looks of query_arrays (each: the cells with their types, and whether the
    engine loaded), what the engine itself gives as rows, in the same form, and the rows."""
    looks = []
    for _ in range(2):
        with open_cached(trace, root=root) as t:
            arrays = t.query_arrays(sql)
            cells = {c: [(type(v), v) for v in a.tolist()] for c, a in arrays.items()}
            looks.append((cells, t.engine_loaded))
    with open_trace(trace) as t:
        columns, rows = t.query_columns(sql)
    expected = {c: [(type(r[i]), r[i]) for r in rows] for i, c in enumerate(columns)}
    return looks, expected, rows


def test_arrays_are_kept_like_rows(trace: Path, tmp_path: Path) -> None:
    """query_arrays (the report's timeline reads its intervals so) answers a second look
    from the store: the same cells, the same types, and no engine."""
    sql = "select id, ts, name, parent_id, dur * 0.5 as half from slice order by id"
    looks, expected, rows = _two_array_looks(trace, tmp_path / "results", sql)
    assert looks == [(expected, True), (expected, False)]
    assert len(rows) > 100 and any(r[3] is None for r in rows)


def test_int_and_text_columns_are_kept_in_numpys_format(trace: Path, tmp_path: Path) -> None:
    """The GPU ops the analyses read out (integers and names) are kept as .npz, read back
    cell for cell; a kept file that is a symlink or names another key is a miss."""
    sql = "select id, ts, dur, name from slice where dur > 0 order by id"
    root = tmp_path / "results"
    looks, expected, _ = _two_array_looks(trace, root, sql)
    assert looks == [(expected, True), (expected, False)]
    kept = list(root.rglob("*.npz"))
    assert len(kept) == 1 and kept[0].stat().st_mode & 0o777 == 0o600
    # A planted link in its place: never followed, the engine answers again.
    target = tmp_path / "planted.npz"
    shutil.copy(kept[0], target)
    kept[0].unlink()
    kept[0].symlink_to(target)
    with open_cached(trace, root=root) as t:
        assert [(type(v), v) for v in t.query_arrays(sql)["name"].tolist()] == expected["name"]
        assert t.engine_loaded
    # A damaged file (cut short): a miss, not a traceback.
    data = kept[0].read_bytes()
    kept[0].write_bytes(data[: len(data) // 2])
    with open_cached(trace, root=root) as t:
        assert [(type(v), v) for v in t.query_arrays(sql)["name"].tolist()] == expected["name"]
        assert t.engine_loaded
    # Another statement's answer under this one's name: a miss.
    store = result_cache.ResultStore(kept[0].parent.name, root)
    assert store.put_arrays("other", {"id": np.array([1, 2], dtype=object)})
    (kept[0].parent / "other.npz").replace(kept[0])
    with open_cached(trace, root=root) as t:
        assert [(type(v), v) for v in t.query_arrays(sql)["id"].tolist()] == expected["id"]
        assert t.engine_loaded


def test_a_table_python_wrote_is_replayed_for_a_new_statement(trace: Path, tmp_path: Path) -> None:
    """A table of Python's rows is chained by their digest, not written to the engine on a
    look the store answers, and written when a later statement needs the engine."""
    from exporters.perfetto.engine.trace_processor import ArrayTable

    root = tmp_path / "results"
    table = ArrayTable(
        "t_py",
        {"a": np.array([1, 2, 3], dtype=np.int64), "b": np.array([-1, 5, 6], dtype=np.int64)},
        {"b": -1},
    )
    with open_cached(trace, root=root) as t:
        t.create_table(table)
        assert t.query("select a, b from t_py order by a") == [
            {"a": 1, "b": None},
            {"a": 2, "b": 5},
            {"a": 3, "b": 6},
        ]
    with open_cached(trace, root=root) as t:
        t.create_table(table)
        assert t.query("select a, b from t_py order by a")[0] == {"a": 1, "b": None}
        assert not t.engine_loaded
        assert t.scalar("select sum(a) + sum(b) from t_py") == 17  # new: the engine replays
        assert t.engine_loaded
    other = ArrayTable("t_py", {"a": np.array([7], dtype=np.int64), "b": np.array([8])})
    assert other.digest() != table.digest()
