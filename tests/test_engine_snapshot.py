"""New SQL on a looked-at trace (issue 24): the embedded engine restored from a snapshot of
its heap answers like a freshly loaded one, never for changed bytes, never from a file
someone else could have put there or a damaged one, and within its disk cap."""

from __future__ import annotations

import errno
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporters.analysis.idle_stacks import fold_mode
from exporters.perfetto.engine import engine_snapshot, result_cache
from exporters.perfetto.engine.cached_trace import CachedTrace, open_cached
from exporters.perfetto.engine.trace_processor import QueryError, Trace, open_trace
from exporters.perfetto.engine.views import load_views

from .cache_attacks import LOOSENED, loosen
from .conftest import run_cli
from .trace_rewrite import OTHER, rewrite_in_place

REFUSED = "not using the cached engine snapshot"

# What the first look asks (and leaves behind: a table a fresh engine does not have).
FIRST = [
    "select count(*) as n from slice",
    "create perfetto table first_look_leftover as select 1 as x",
]
# What the second look asks: nothing the first asked, so the result store cannot answer.
NEW = [
    "select name, count(*) as n, sum(dur) as total from slice group by 1 order by 3 desc, 1",
    "select utid, tid, name from thread order by utid",
    "select max(depth) as depth, min(ts) as ts, max(ts + dur) as end_ts from slice",
    "select key, count(*) as n from args group by 1 order by 1",
    "select * from first_look_leftover",
]


@pytest.fixture(autouse=True)
def _snapshot_small_traces(monkeypatch: pytest.MonkeyPatch) -> None:
    # The test traces load in well under the threshold that keeps real ones.
    monkeypatch.setattr(engine_snapshot, "MIN_LOAD_S", 0.0)
    monkeypatch.delenv(engine_snapshot.ENV_CAP_MB, raising=False)
    monkeypatch.delenv(result_cache.ENV_DISABLE, raising=False)


@pytest.fixture()
def trace(example_trace: Path, tmp_path: Path) -> Path:
    """A copy of the converted example: each test changes its own file."""
    path = tmp_path / "t.perfetto-trace"
    shutil.copy(example_trace, path)
    return path


def _answers(t: Trace, statements: list[str]) -> list[Any]:
    out: list[Any] = []
    for sql in statements:
        try:
            out.append(t.query(sql))
        except QueryError as exc:
            out.append(f"error: {exc}")
    load_views(t)
    out.append(t.query("select name, count(*) as n from xpu_gpu_op group by 1 order by 2, 1"))
    out.append(fold_mode(t, "gpu", "ns", None).render())
    return out


def _look(path: Path, root: Path, statements: list[str]) -> tuple[list[Any], bool, bool]:
    """(answers, engine started, engine restored) of one look as the commands make it."""
    with open_cached(path, root=root) as t:
        assert isinstance(t, CachedTrace)
        answers = _answers(t, statements)
        assert t.snapshots is not None
        return answers, t.engine_loaded, t.snapshots.restored


def _fresh(path: Path, statements: list[str]) -> list[Any]:
    with open_trace(path) as t:
        return _answers(t, statements)


def _snapshots(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "engine").glob("*.heap"))


@pytest.fixture(params=["mapped", "read"])
def restore_by(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[str]:
    """Both ways a snapshot gets into the heap: mapped (a local file system, what this
    machine's temporary directory is) or read (a network or cluster file system)."""
    if request.param == "mapped":
        fd = os.open(tmp_path, os.O_RDONLY)
        try:
            kind = engine_snapshot._file_system_type(fd)
        finally:
            os.close(fd)
        if kind not in engine_snapshot._LOCAL_FILE_SYSTEMS:
            named = "unknown" if kind is None else f"{kind:#x}"
            pytest.skip(f"the temporary directory's file system ({named}) is not mapped")
    decided: list[bool] = []
    maps_safely = engine_snapshot._maps_safely

    def decide(fd: int, runs: list[tuple[int, int]]) -> bool:
        decided.append(request.param == "mapped" and maps_safely(fd, runs))
        return decided[-1]

    monkeypatch.setattr(engine_snapshot, "_maps_safely", decide)
    yield str(request.param)
    # Mapped where asked: else the mapped path went untested here.
    assert decided == [request.param == "mapped"] * len(decided)


def test_restored_engine_answers_new_sql_like_a_fresh_load(
    trace: Path, tmp_path: Path, restore_by: str
) -> None:
    root = tmp_path / "results"
    _, loaded, restored = _look(trace, root, FIRST)
    assert loaded and not restored
    assert len(_snapshots(tmp_path)) == 1
    second, loaded, restored = _look(trace, root, NEW)
    assert loaded and restored  # the engine answered, restored rather than loaded
    expected = _fresh(trace, NEW)
    assert second == expected
    # Taken before the first look's own tables: the second look does not see them.
    assert expected[-3].startswith("error:") and "first_look_leftover" in expected[-3]
    assert expected[0] and expected[1] and expected[-1]  # something was compared


def test_a_restored_engine_is_snapshotted_as_it_was(trace: Path, tmp_path: Path) -> None:
    """A restore rewrites nothing; each later look restores the same heap again."""
    root = tmp_path / "results"
    _look(trace, root, FIRST)
    kept = _snapshots(tmp_path)[0].read_bytes()
    for i in range(2):
        _, _, restored = _look(trace, root, [f"select {i} as i, count(*) from thread"])
        assert restored
    assert _snapshots(tmp_path)[0].read_bytes() == kept


@pytest.mark.parametrize("change", ["replaced", "removed"])
def test_a_mapped_snapshot_replaced_or_removed_under_the_engine(
    trace: Path, tmp_path: Path, change: str, restore_by: str
) -> None:
    """What the cache itself does to a snapshot another look has mapped (a newer one renamed
    over it, the cap unlinking it) leaves that engine its pages: the same answers."""
    root = tmp_path / "results"
    _look(trace, root, FIRST)
    snapshot = _snapshots(tmp_path)[0]
    with open_cached(trace, root=root) as t:
        assert isinstance(t, CachedTrace)
        first = t.query(NEW[0])
        assert t.snapshots is not None and t.snapshots.restored
        if change == "replaced":
            other = tmp_path / "other.heap"
            other.write_bytes(b"\0" * snapshot.stat().st_size)
            os.replace(other, snapshot)
        else:
            snapshot.unlink()
        with open("/proc/sys/vm/drop_caches", "w") as f:  # the pages read back from disk
            f.write("1\n")
        assert _answers(t, NEW[1:]) == _fresh(trace, NEW)[1:]
        assert t.query(NEW[0]) == first


def test_a_changed_trace_never_gets_its_old_snapshot(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    _look(trace, root, FIRST)
    before = _fresh(trace, NEW)
    other = rewrite_in_place(trace, tmp_path)
    answers, loaded, restored = _look(trace, root, NEW)
    assert loaded and not restored
    assert answers == _fresh(other, NEW)
    assert answers[0] != before[0]  # the two traces answer differently
    assert len(_snapshots(tmp_path)) == 2  # one per bytes; the old one is never named again


def _runs_of(path: Path) -> list[tuple[int, int]]:
    data = path.read_bytes()
    head, run = engine_snapshot._HEAD, engine_snapshot._RUN
    count = head.unpack_from(data, 0)[5]
    return [run.unpack_from(data, head.size + i * run.size) for i in range(count)]


def _rewrite_header(path: Path, runs: list[tuple[int, int]] | None = None, **fields: int) -> None:
    """A snapshot whose header (or run table: as many runs) says something else, its header
    checksum made right again: what only a deliberate edit could make."""
    data = bytearray(path.read_bytes())
    head, run = engine_snapshot._HEAD, engine_snapshot._RUN
    values = list(head.unpack_from(data, 0))
    names = ["magic", "format", "name", "heap", "crc", "runs", "sp", "base", "end", "buf", "slot"]
    for name, value in fields.items():
        values[names.index(name)] = value
    head.pack_into(data, 0, *values)
    for i, (first, pages) in enumerate(runs or []):
        run.pack_into(data, head.size + i * run.size, first, pages)
    table_end = head.size + values[5] * run.size
    crc = engine_snapshot._crc32(memoryview(bytes(data[:table_end])))
    struct.pack_into("<I", data, table_end, crc)
    path.write_bytes(bytes(data))


def _damage(snapshot: Path, how: str, tmp_path: Path) -> None:
    if how in LOOSENED:
        planted = tmp_path / "planted"
        planted.mkdir()
        loosen(snapshot, how, planted)
    elif how == "truncated":
        with snapshot.open("r+b") as f:
            f.truncate(snapshot.stat().st_size - engine_snapshot.PAGE)
    elif how == "damaged page":
        with snapshot.open("r+b") as f:
            f.seek(-1000, os.SEEK_END)
            byte = f.read(1)
            f.seek(-1000, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
    elif how == "damaged header":
        with snapshot.open("r+b") as f:
            f.seek(engine_snapshot._HEAD.size - 4)
            f.write(b"\xff\xff\xff\xff")
    elif how == "another trace's":
        other = tmp_path / "other.perfetto-trace"
        run_cli("convert", OTHER, "-o", other, check=True)
        with open_cached(other, root=tmp_path / "results") as t:
            t.query("select 1")
        theirs = next(p for p in _snapshots(tmp_path) if p != snapshot)
        os.replace(theirs, snapshot)
    elif how == "runs out of order":
        runs = _runs_of(snapshot)
        assert len(runs) > 1
        _rewrite_header(snapshot, runs=[runs[1], runs[0], *runs[2:]])
    elif how == "another engine state":
        sp = engine_snapshot._HEAD.unpack_from(snapshot.read_bytes(), 0)[6]
        _rewrite_header(snapshot, sp=sp - 16)
    else:
        raise AssertionError(how)


@pytest.mark.parametrize(
    "how",
    [
        "symlink",
        "group readable",
        "other owner",
        "truncated",
        "damaged page",
        "damaged header",
        "another trace's",
        "another engine state",
        "runs out of order",
    ],
)
def test_a_planted_loose_or_damaged_snapshot_is_refused(
    trace: Path, tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str], restore_by: str
) -> None:
    if how == "other owner" and os.geteuid() != 0:
        pytest.skip("chown to another uid needs root")
    root = tmp_path / "results"
    _look(trace, root, FIRST)
    snapshot = _snapshots(tmp_path)[0]
    _damage(snapshot, how, tmp_path)
    planted = {p: p.read_bytes() for p in tmp_path.glob("planted/*")}
    capsys.readouterr()
    answers, loaded, restored = _look(trace, root, NEW)
    err = capsys.readouterr().err
    assert loaded and not restored
    assert [line for line in err.splitlines() if REFUSED in line] == [
        line for line in err.splitlines() if line
    ]
    assert len(err.strip().splitlines()) == 1, err
    assert answers == _fresh(trace, NEW)
    # The load kept a good snapshot in its place (never written through a symlink).
    assert not snapshot.is_symlink() and snapshot.stat().st_uid == os.geteuid()
    assert {p: p.read_bytes() for p in planted} == planted
    assert _look(trace, root, ["select 2 as two"])[2] is True


def test_a_directory_open_to_others_turns_snapshots_off(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "results"
    _look(trace, root, FIRST)
    (tmp_path / "engine").chmod(0o755)
    capsys.readouterr()
    answers, loaded, restored = _look(trace, root, NEW)
    assert loaded and not restored
    assert "not using the cached engine snapshots" in capsys.readouterr().err
    assert answers == _fresh(trace, NEW)


def test_no_cache_bypasses_snapshots(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _look(trace, tmp_path / "results", FIRST)
    monkeypatch.setenv(result_cache.ENV_DISABLE, "1")
    with open_cached(trace, root=tmp_path / "results") as t:
        assert type(t) is Trace  # loaded, not restored
        with pytest.raises(QueryError):
            t.query("select * from first_look_leftover")
    other = tmp_path / "fresh"
    with open_cached(trace, root=other / "results") as t:
        t.query("select 1")
    assert not (other / "engine").exists()


def test_cap_zero_keeps_no_snapshot(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(engine_snapshot.ENV_CAP_MB, "0")
    _, loaded, restored = _look(trace, tmp_path / "results", FIRST)
    assert loaded and not restored
    assert not (tmp_path / "engine").exists()


def test_a_snapshot_over_the_cap_is_not_kept(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(engine_snapshot.ENV_CAP_MB, "1")
    _look(trace, tmp_path / "results", FIRST)
    assert not _snapshots(tmp_path)
    assert "engine snapshot not kept" in capsys.readouterr().err


def test_the_cap_removes_the_least_recently_used(tmp_path: Path) -> None:
    mb = 1024**2
    for i in range(5):
        path = tmp_path / f"s{i}.heap"
        path.write_bytes(b"x" * mb)
        os.utime(path, ns=(i * 10**9, i * 10**9))
    (tmp_path / "unrelated").write_bytes(b"x" * 4 * mb)  # not a snapshot: never removed
    engine_snapshot.prune(tmp_path, 2 * mb)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s3.heap", "s4.heap", "unrelated"]


def test_looks_within_the_cap_keep_the_last_used(
    example_trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "results"
    traces = []
    for i in range(3):
        path = tmp_path / f"t{i}.perfetto-trace"
        shutil.copy(example_trace, path)
        traces.append(path)
    _look(traces[0], root, FIRST)
    size = _snapshots(tmp_path)[0].stat().st_size
    # Room for two snapshots (MiB rounded up)
    monkeypatch.setenv(engine_snapshot.ENV_CAP_MB, str(-(-2 * size // 1024**2)))
    _look(traces[1], root, FIRST)
    assert _look(traces[0], root, ["select 1 as one"])[2]  # t0 used last now
    _look(traces[2], root, FIRST)  # a third: t1, used longest ago, goes
    assert len(_snapshots(tmp_path)) == 2
    assert _look(traces[0], root, ["select 2 as two"])[2]
    assert not _look(traces[1], root, ["select 3 as three"])[2]


class _FullDisk:
    """A file that takes the header and then reports a full disk."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.writes = 0

    def write(self, data: Any) -> int:
        self.writes += 1
        if self.writes > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return int(self.real.write(data))

    def seek(self, offset: int) -> int:
        return int(self.real.seek(offset))

    def close(self) -> None:
        self.real.close()


def test_a_full_disk_leaves_no_file_and_fails_nothing(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real_output_file = engine_snapshot.OutputFile

    def full(*args: Any, **kwargs: Any) -> Any:
        out = real_output_file(*args, **kwargs)
        out.file = _FullDisk(out.file)
        return out

    monkeypatch.setattr(engine_snapshot, "OutputFile", full)
    answers, _, _ = _look(trace, tmp_path / "results", NEW)
    assert answers == _fresh(trace, NEW)
    assert "engine snapshot not kept (No space left on device)" in capsys.readouterr().err
    assert list((tmp_path / "engine").iterdir()) == []  # nor a temporary file


def test_too_little_free_space_keeps_no_snapshot(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = os.statvfs

    class Small:
        def __init__(self, st: os.statvfs_result) -> None:
            self.f_frsize = st.f_frsize
            self.f_bavail = 10

    monkeypatch.setattr(engine_snapshot.os, "statvfs", lambda p: Small(real(p)))
    _look(trace, tmp_path / "results", FIRST)
    assert not _snapshots(tmp_path)
    assert "under 1 GB free" in capsys.readouterr().err


def test_a_report_from_a_restored_engine_is_a_loaded_ones(trace: Path, tmp_path: Path) -> None:
    """All of report's statements, new to the result store, on a restored engine."""
    from exporters.report.queries import collect

    root = tmp_path / "results"
    _look(trace, root, FIRST)
    with open_cached(trace, root=root) as t:
        assert isinstance(t, CachedTrace)
        report = collect(t, trace.name, stacks=True)
        assert t.snapshots is not None and t.snapshots.restored
    with open_trace(trace) as t:
        expected = collect(t, trace.name, stacks=True)
    assert report == expected
    assert report.sections  # something was compared


def test_runs_lie_in_the_file_as_in_the_heap_modulo_2_mib(trace: Path, tmp_path: Path) -> None:
    """Each run's file offset is its heap offset modulo 2 MiB (mapped so, the page cache's
    large folios map whole), past the header and the run before it; the gaps are holes."""
    _look(trace, tmp_path / "results", FIRST)
    snapshot = _snapshots(tmp_path)[0]
    size = snapshot.stat().st_size
    runs = _runs_of(snapshot)
    count = len(runs)
    offsets, end = engine_snapshot._run_offsets(runs)
    assert end == size
    at = engine_snapshot._data_offset(count)
    for (first, pages), offset in zip(runs, offsets, strict=True):
        assert offset >= at and (offset - first * engine_snapshot.PAGE) % (2 << 20) == 0
        at = offset + pages * engine_snapshot.PAGE
    # A heap of several runs: the rule was met more than once.
    assert count > 1, runs
    assert snapshot.stat().st_blocks * 512 <= size
