"""The caches are a pure optimisation (issue 34): two looks at once, a full disk, damaged or
odd entries, a root look with another user's HOME, odd settings and umasks never change an
answer or fail a command; any doubt means the engine answers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exporters.perfetto.engine import engine_snapshot, result_cache
from exporters.perfetto.engine.cached_trace import CachedTrace, open_cached
from exporters.perfetto.engine.trace_processor import QueryError, open_trace

from .conftest import REPO, run_cli

MAKE = "create perfetto table busy_threads as select utid, count(*) as n from thread group by 1"
USE = "select count(*) as n from busy_threads"


@pytest.fixture(autouse=True)
def _cache_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(result_cache.ENV_DISABLE, raising=False)
    monkeypatch.delenv(engine_snapshot.ENV_CAP_MB, raising=False)


@pytest.fixture()
def trace(example_trace: Path, tmp_path: Path) -> Path:
    path = tmp_path / "t.perfetto-trace"
    shutil.copy(example_trace, path)
    return path


def _engine_says(trace: Path, *statements: str) -> object:
    with open_trace(trace) as t:
        for sql in statements[:-1]:
            t.execute(sql)
        return t.query(statements[-1])


# --- L1: two looks at once ------------------------------------------------------------------


def test_a_statement_kept_by_another_look_still_runs_on_an_open_engine(
    trace: Path, tmp_path: Path
) -> None:
    """Look B's engine is open when look A keeps the answer of a statement that makes a
    table: B must still run it, or B's next statement finds no such table."""
    root = tmp_path / "results"
    with open_cached(trace, root=root) as a, open_cached(trace, root=root) as b:
        assert isinstance(a, CachedTrace) and isinstance(b, CachedTrace)
        a.query("select 1 as one")
        b.query("select 1 as one")  # kept by A: B has no engine yet
        b.query("select 2 as two")  # new: B opens its engine here
        a.query("select 2 as two")
        a.execute(MAKE)  # kept by A while B's engine is open
        b.execute(MAKE)
        assert b.engine_loaded
        assert b.query(USE) == _engine_says(trace, MAKE, USE)


def test_an_error_is_never_kept_as_an_answer(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    with open_cached(trace, root=root) as t, pytest.raises(QueryError):
        t.query(USE)  # no such table yet
    with open_cached(trace, root=root) as t:
        assert isinstance(t, CachedTrace)
        with pytest.raises(QueryError):
            t.query(USE)
        assert t.engine_loaded  # asked the engine again, not a kept error
    assert not [p for p in root.rglob("*") if p.is_file() and b"no such table" in p.read_bytes()]


def _cli(*args: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )


@pytest.mark.parametrize("offset_s", [0.0, 0.3, 0.9])
def test_two_reports_at_once_both_answer_and_so_do_later_ones(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, offset_s: float
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(_private_cache(tmp_path)))
    expected = run_cli("report", trace, "--format", "json", "--no-cache", check=True).stdout
    first = _cli("report", trace, "--format", "json")
    time.sleep(offset_s)
    second = _cli("report", trace, "--format", "json")
    for proc in (first, second):
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err
        assert out == expected
    later = run_cli("report", trace, "--format", "json")
    assert later.returncode == 0, later.stderr
    assert later.stdout == expected


def _private_cache(tmp_path: Path) -> Path:
    """A cache of this test's own with the built engine module (hard links, as the suite's
    session cache has them), so each look starts from an empty store."""
    from exporters.perfetto.engine.wasm_engine import WasmTransport

    WasmTransport().close()  # the session's cache has the compiled module (made once)
    cache = tmp_path / "cache"
    (cache / "xpu-perf").mkdir(parents=True, mode=0o700)
    cache.chmod(0o700)
    built = Path(os.environ["XDG_CACHE_HOME"]) / "xpu-perf" / "wasm"
    if built.is_dir():
        shutil.copytree(built, cache / "xpu-perf" / "wasm", copy_function=os.link)
    return cache


# --- C4: every kept answer checked; a fuzz over the entries --------------------------------

ARRAYS_SQL = "select id, ts, dur, name from slice where dur > 0 order by id"
ROWS_SQL = "select name, count(*) as n, sum(dur) * 0.5 as half from slice group by 1 order by 1"


def _fuzz_look(path: Path, root: Path) -> tuple[object, bool]:
    """A look asking in every way the commands do: views (run for effect), rows, columns
    of text and integers (.npz), columns with NULLs and reals (rows), the folded stacks."""
    from exporters.analysis.idle_stacks import fold_mode
    from exporters.perfetto.engine.views import load_views

    with open_cached(path, root=root) as t:
        load_views(t)
        arrays = t.query_arrays(ARRAYS_SQL)
        mixed = t.query_arrays("select id, parent_id, dur * 0.5 as half from slice order by id")
        answers = (
            t.query(ROWS_SQL),
            t.query_columns("select utid, tid, name from thread order by utid"),
            {c: [(type(v), v) for v in a.tolist()] for c, a in arrays.items()},
            {c: [(type(v), v) for v in a.tolist()] for c, a in mixed.items()},
            fold_mode(t, "gpu", "ns", None).render(),
        )
        loaded = t.engine_loaded if isinstance(t, CachedTrace) else True
    return answers, loaded


def _entries(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.suffix in (".json", ".npz"))


def _wrong_shape(entry: Path, rng: object) -> bytes:
    """The entry's answer replaced by one of another shape, sealed as the store seals (so
    only the shape check can tell)."""
    import io
    import random

    import numpy as np

    assert isinstance(rng, random.Random)
    key = entry.stem
    if entry.suffix == ".npz":
        columns = rng.choice(
            [
                {"names": np.array(["a", "b"]), "ints0": np.arange(3), "ints1": np.arange(2)},
                {"names": np.array(["a"]), "values0": np.array(["x"]), "codes0": np.array([5])},
                {"names": np.array(["a"]), "ints0": np.array([[1, 2]])},
                {"names": np.array(["a"]), "ints0": np.array([1.5])},
                {"names": np.array([1, 2])},
            ]
        )
        buffer = io.BytesIO()
        np.savez(buffer, **columns)
        return result_cache.seal_arrays(key, buffer.getvalue())
    shape = rng.choice(
        [
            [1, 2, 3],
            "rows",
            {"columns": ["a"], "rows": [[1, 2]]},
            {"columns": ["a"], "rows": [[True]]},
            {"columns": ["a", "b"], "values": [[1], [1, 2]]},
            {"columns": [1], "rows": []},
            {"columns": ["a"], "rows": [[{"x": 1}]]},
            {"columns": ["a"]},
            {"rows": 5},
            0,
        ]
    )
    return result_cache.seal_rows(key, json.dumps(shape))


def _damage(entry: Path, how: str, rng: object) -> None:
    import random

    assert isinstance(rng, random.Random)
    data = bytearray(entry.read_bytes())
    if how == "flip":
        at = rng.randrange(len(data))
        data[at] ^= 1 << rng.randrange(8)
    elif how == "digit":  # what changed a report silently: one digit of a number
        digits = [i for i, b in enumerate(data) if 0x30 <= b <= 0x39]
        at = rng.choice(digits)
        data[at] = ord(str((int(chr(data[at])) + 1) % 10))
    elif how == "truncate":
        del data[rng.randrange(len(data)) :]
    else:
        data = bytearray(_wrong_shape(entry, rng))
    entry.write_bytes(bytes(data))


@pytest.mark.parametrize("seed", range(6))
def test_fuzz_damaged_entries_answer_as_the_engine_does(
    trace: Path, tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """Random byte flips, changed digits, truncations and wrong shapes in random entries
    (one, several, every one): each look answers as the engine does, and says it when it
    met a damaged entry."""
    import random

    rng = random.Random(seed)
    pristine = tmp_path / "pristine"
    expected, loaded = _fuzz_look(trace, pristine)
    assert loaded
    with open_trace(trace) as t:  # the store is never in the way of what it stands for
        assert t.query(ROWS_SQL) == expected[0]  # type: ignore[index]
    entries = _entries(pristine)
    assert any(p.suffix == ".npz" for p in entries) and any(p.suffix == ".json" for p in entries)
    capsys.readouterr()
    for round_ in range(6):
        root = tmp_path / f"round{round_}"
        shutil.copytree(pristine, root)
        kept = _entries(root)
        hit = rng.sample(kept, rng.choice([1, 3, len(kept)]))
        for entry in hit:
            _damage(entry, rng.choice(["flip", "digit", "truncate", "shape"]), rng)
        answers, loaded = _fuzz_look(trace, root)
        err = capsys.readouterr().err
        assert answers == expected, (round_, [p.name for p in hit])
        assert loaded  # a damaged entry was met: the engine answered from there on
        assert "a cached query result was damaged" in err, err
        assert len(err.strip().splitlines()) == 1, err
        # What the engine answered was kept again: the next look loads nothing.
        assert _fuzz_look(trace, root) == (expected, False)


def test_every_entry_damaged_a_report_answers_as_the_engine_does(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One digit changed in every kept answer of a report: the next report is the engine's."""
    import random

    rng = random.Random(34)
    cache = _private_cache(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    expected = run_cli("report", trace, "--format", "json", "--no-cache", check=True).stdout
    assert run_cli("report", trace, "--format", "json", check=True).stdout == expected
    for entry in _entries(cache / "xpu-perf" / "results"):
        _damage(entry, "digit" if entry.suffix == ".json" else "flip", rng)
    again = run_cli("report", trace, "--format", "json")
    assert again.returncode == 0, again.stderr
    assert again.stdout == expected
    assert "a cached query result was damaged" in again.stderr


# --- L2: a full cache file system ------------------------------------------------------------

BIG = "select s.id, s.ts, s.dur, s.name, t.id as other from slice s join slice t limit 40000"


@pytest.fixture()
def small_fs(tmp_path: Path) -> object:
    """A directory on a tmpfs of 64 KiB (root only), grown to 64 MiB by `grow()`."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir(mode=0o700)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")

    class Fs:
        path = where

        @staticmethod
        def grow() -> None:
            subprocess.run(["mount", "-o", "remount,size=64m", str(where)], check=True)

    yield Fs
    subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_cache_file_system_costs_only_speed(
    trace: Path, small_fs: object, capsys: pytest.CaptureFixture[str]
) -> None:
    """The first look fills the store's file system: a big answer is not kept, smaller
    ones after it are.  Every later look, with the space freed, answers as the engine does
    (before: the second look's engine skipped the kept statement that made a table, the
    next statement failed, and that error was kept for every look after)."""
    root = small_fs.path / "results"  # type: ignore[attr-defined]
    asked = ["select 1 as one", BIG, MAKE, USE]
    new = "select sum(n) as total from busy_threads"
    with open_cached(trace, root=root) as t:
        first = [t.query(asked[0]), t.query(asked[1]), t.execute(asked[2]), t.query(asked[3])]
    assert len(first[1]) == 40000
    kept = sorted(p.stat().st_size for p in root.rglob("*.json"))
    assert len(kept) == 3  # the big one was not kept; those before and after it were
    assert "query results not kept (No space left on device" in capsys.readouterr().err
    small_fs.grow()  # type: ignore[attr-defined]
    for _ in range(2):
        with open_cached(trace, root=root) as t:
            again = [t.query(asked[0]), t.query(asked[1]), t.execute(asked[2]), t.query(asked[3])]
            total = t.query(new)
        assert again == first
        assert total == _engine_says(trace, MAKE, new)
    assert not list(small_fs.path.rglob("*.tmp"))  # type: ignore[attr-defined]


# --- C5: a cache path that is not what it should be ----------------------------------------

QUERY = "select name, count(*) as n from slice group by 1 order by 2 desc, 1 limit 5"


def _odd_place(cache: Path, trace: Path, where: str) -> Path:
    """The path `where` names in this trace's cache (the results and snapshot names are the
    ones a look at `trace` uses)."""
    from exporters.perfetto.engine.cached_trace import _chain, engine_key

    key = result_cache.trace_key(trace)
    results = cache / "xpu-perf" / "results"
    state = _chain(_chain(f"format {result_cache.FORMAT}", key, engine_key(None)), "query", QUERY)
    return {
        "snapshot": cache / "xpu-perf" / "engine" / f"{engine_snapshot.snapshot_name(key)}.heap",
        "snapshot dir": cache / "xpu-perf" / "engine",
        "answer": results / key / f"{state}.json",
        "trace dir": results / key,
        "results dir": results,
    }[where]


@pytest.mark.parametrize(
    ("where", "odd"),
    [
        ("snapshot", "directory"),
        ("snapshot", "file"),
        ("answer", "directory"),
        ("answer", "file"),
        ("snapshot dir", "file"),
        ("trace dir", "file"),
        ("results dir", "file"),
    ],
)
def test_a_cache_path_of_the_wrong_kind_loads_the_trace(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str, odd: str
) -> None:
    cache = _private_cache(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    place = _odd_place(cache, trace, where)
    for directory in reversed(place.parents):
        if directory.is_relative_to(cache) and not directory.exists():
            directory.mkdir(mode=0o700)
            directory.chmod(0o700)  # private, as the cache's checks want, whatever the umask
    if odd == "directory":
        place.mkdir(mode=0o700)
        (place / "inside").write_bytes(b"")
    else:
        place.write_bytes(b"not what it should be")
        place.chmod(0o600)
    expected = run_cli("query", trace, QUERY, "--format", "json", "--no-cache", check=True).stdout
    for _ in range(2):
        got = run_cli("query", trace, QUERY, "--format", "json")
        assert got.returncode == 0, got.stderr
        assert got.stdout == expected
        assert len(got.stderr.splitlines()) <= 1, got.stderr


# --- S4: root with another user's HOME -------------------------------------------------------


@pytest.fixture()
def other_user() -> object:
    """A user created for the test, with a home of its own (removed after)."""
    if os.geteuid() != 0 or not shutil.which("useradd"):
        pytest.skip("creating a user needs root and useradd")
    import pwd
    import tempfile

    name = f"xpc{os.getpid() % 100000}"
    home = Path(tempfile.mkdtemp(prefix="xpu-perf-home-"))
    made = subprocess.run(
        ["useradd", "--no-create-home", "--home-dir", str(home), "--shell", "/bin/sh", name],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        shutil.rmtree(home)
        pytest.skip(f"useradd failed: {made.stderr.strip()}")
    user = pwd.getpwnam(name)
    os.chown(home, user.pw_uid, user.pw_gid)
    home.chmod(0o755)
    yield user
    subprocess.run(["userdel", name], check=False, capture_output=True)
    shutil.rmtree(home, ignore_errors=True)


def test_root_with_another_users_home_creates_nothing_there(
    trace: Path, other_user: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pwd

    assert isinstance(other_user, pwd.struct_passwd)
    home = Path(other_user.pw_dir)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CACHE_HOME")
    # Root's own cache is the real one here: keep no engine snapshot in it.
    monkeypatch.setenv("XPU_PERF_ENGINE_CACHE_MB", "0")
    root_cache = Path(pwd.getpwuid(0).pw_dir) / ".cache" / "xpu-perf" / "results"
    key = result_cache.trace_key(trace)
    expected = run_cli("query", trace, QUERY, "--format", "json", "--no-cache", check=True).stdout
    try:
        for _ in range(2):
            got = run_cli("query", trace, QUERY, "--format", "json")
            assert got.returncode == 0, got.stderr
            assert got.stdout == expected
            assert got.stderr == ""
        assert list(home.iterdir()) == []  # no root-owned .cache in the user's home
        assert (root_cache / key).is_dir()  # root's own cache answered
    finally:
        shutil.rmtree(root_cache / key, ignore_errors=True)
    # The user's own cache is theirs to make.
    made = subprocess.run(
        ["runuser", "-u", other_user.pw_name, "--", "mkdir", "-p", f"{home}/.cache/xpu-perf/x"],
        capture_output=True,
        text=True,
    )
    assert made.returncode == 0, made.stderr
    # And where the user's cache is there already, root leaves it alone too.
    got = run_cli("query", trace, QUERY, "--format", "json")
    shutil.rmtree(root_cache / key, ignore_errors=True)
    assert got.returncode == 0 and got.stdout == expected and got.stderr == "", got.stderr
    owners = {p.stat().st_uid for p in home.rglob("*")}
    assert owners == {other_user.pw_uid}


# --- W4: umask 000 ---------------------------------------------------------------------------


def test_under_umask_000_the_cache_is_private_and_used(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every directory and file the looks make is 0700 / 0600 whatever the umask, so the
    next look uses them (before: 0777 / 0666, refused on every run, the engine module
    compiled each time).  A fresh cache: the first look compiles the engine module."""
    cache = tmp_path / "fresh" / "cache"
    (tmp_path / "fresh").mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("XPU_PERF_ENGINE_CACHE_MB", "0")
    args = [sys.executable, "-m", "collector.cli", "query", str(trace), QUERY]
    outs = []
    for _ in range(2):
        proc = subprocess.run(args, capture_output=True, text=True, cwd=REPO, timeout=600, umask=0)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr == ""  # nothing refused
        outs.append(proc.stdout)
    assert outs[0] == outs[1]
    made = [cache, *cache.rglob("*")]
    assert {oct(p.stat().st_mode & 0o777) for p in made if p.is_dir()} == {"0o700"}
    assert {oct(p.stat().st_mode & 0o777) for p in made if p.is_file()} == {"0o600"}
    assert any(p.suffix == ".cwasm" for p in made) and any(p.suffix == ".json" for p in made)


def test_under_umask_000_a_built_library_is_not_writable_by_others(tmp_path: Path) -> None:
    """The sampler library built into a cache under umask 000: its directories 0700, the
    library 0755 (the compiler's 0777 & ~umask was writable by all: refused, rebuilt)."""
    out = tmp_path / "cache" / "sampler" / "key"
    tmp_path.chmod(0o700)
    code = (
        "import sys, pathlib\n"
        "from collector.inject_build import build_sampler\n"
        "build_sampler(out_dir=pathlib.Path(sys.argv[1]))"
    )
    subprocess.run(
        [sys.executable, "-c", code, str(out)], check=True, cwd=REPO, timeout=600, umask=0
    )
    assert {
        oct(p.stat().st_mode & 0o777)
        for p in out.parents
        if p.is_relative_to(tmp_path) and p != tmp_path
    } == {"0o700"}
    assert [oct(p.stat().st_mode & 0o777) for p in out.iterdir()] == ["0o755"]


# --- W3: the settings read strictly ----------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "false", "no", "off", "No", ""])
def test_a_no_value_leaves_the_cache_on(trace: Path, tmp_path: Path, value: str) -> None:
    os.environ[result_cache.ENV_DISABLE] = value
    try:
        with open_cached(trace, root=tmp_path / "results") as t:
            assert isinstance(t, CachedTrace)
    finally:
        del os.environ[result_cache.ENV_DISABLE]


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_a_yes_value_bypasses_the_cache(trace: Path, tmp_path: Path, value: str) -> None:
    os.environ[result_cache.ENV_DISABLE] = value
    try:
        with open_cached(trace, root=tmp_path / "results") as t:
            assert not isinstance(t, CachedTrace)
    finally:
        del os.environ[result_cache.ENV_DISABLE]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("XPU_PERF_NO_CACHE", "maybe"),
        ("XPU_PERF_NO_CACHE", "2"),
        ("XPU_PERF_ENGINE_CACHE_MB", "-1"),
        ("XPU_PERF_ENGINE_CACHE_MB", "abc"),
        ("XPU_PERF_ENGINE_CACHE_MB", "1.5"),
        ("XPU_PERF_RESULT_CACHE_MB", "-5"),
        ("XPU_PERF_RESULT_CACHE_MB", "lots"),
    ],
)
@pytest.mark.parametrize("command", ["query", "report", "folded"])
def test_a_bad_setting_is_one_line_before_any_work(
    trace: Path, monkeypatch: pytest.MonkeyPatch, name: str, value: str, command: str
) -> None:
    monkeypatch.setenv(name, value)
    args: list[str | Path] = [command, trace] + (["select 1"] if command == "query" else [])
    got = run_cli(*args)
    assert got.returncode == 2
    assert got.stdout == ""
    assert got.stderr.count("\n") == 1 and name in got.stderr and repr(value) in got.stderr


# --- W2: the result store's size is capped ---------------------------------------------------


def _store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def test_the_result_store_stays_under_its_cap_dropping_the_least_recently_used(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPU_PERF_RESULT_CACHE_MB", "1")
    root = tmp_path / "results"
    # Each answer ~300 KB of JSON: four of them do not fit in 1 MiB.
    big = [f"select id, ts, dur, name, {i} as look from slice, (select 1 union all select 2)"
           for i in range(6)]  # fmt: skip
    with open_cached(trace, root=root) as t:
        kept = t.query(big[0])
    assert 200_000 < _store_bytes(root) < 1024**2
    for sql in big[1:]:
        with open_cached(trace, root=root) as t:
            t.query(sql)
        assert _store_bytes(root) <= 1024**2
        with open_cached(trace, root=root) as t:  # used again: the last to go
            assert t.query(big[0]) == kept and not t.engine_loaded  # type: ignore[attr-defined]
    with open_cached(trace, root=root) as t:
        t.query(big[-1])  # the latest is kept
        assert not t.engine_loaded  # type: ignore[attr-defined]
    with open_cached(trace, root=root) as t:
        t.query(big[1])  # dropped long ago: the engine answers
        assert t.engine_loaded  # type: ignore[attr-defined]


def test_a_result_cap_of_zero_keeps_nothing(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XPU_PERF_RESULT_CACHE_MB", "0")
    for _ in range(2):
        with open_cached(trace, root=tmp_path / "results") as t:
            assert t.query(QUERY)
            assert t.engine_loaded  # type: ignore[attr-defined]
    assert not list((tmp_path / "results").rglob("*.json"))


def test_a_killed_writers_leftovers_are_removed(trace: Path, tmp_path: Path) -> None:
    root = tmp_path / "results"
    with open_cached(trace, root=root) as t:
        t.query(QUERY)
    trace_dir = next(root.iterdir())
    old = trace_dir / ".x.json.abc.tmp"
    fresh = trace_dir / ".y.json.def.tmp"
    for leftover in (old, fresh):
        leftover.write_bytes(b"{")
    os.utime(old, ns=(0, 0))
    with open_cached(trace, root=root) as t:
        t.query("select 3 as three")
    assert not old.exists() and fresh.exists()  # another look may be writing that one


# --- The compiled engine module: checked before it is mapped ---------------------------------


def test_a_damaged_engine_module_is_compiled_again(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """wasmtime maps a serialized module with a flipped bit in its code as it is: the
    module's checksum refuses it, one line says so, and the next look uses the module
    compiled again."""
    cache = _private_cache(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    monkeypatch.setenv("XPU_PERF_ENGINE_CACHE_MB", "0")
    args = ("query", trace, QUERY, "--format", "json", "--no-cache")
    expected = run_cli(*args, check=True).stdout
    checked = "trace_processor-*-*.cwasm"  # the module's CRC-32 in its name
    (module,) = (cache / "xpu-perf" / "wasm").glob(checked)
    data = bytearray(module.read_bytes())
    data[len(data) // 3] ^= 0x10
    # A file of its own: the module is a hard link to the suite's (and its user's) compiled
    # one, which writing through the link damaged for every later test.
    module.unlink()
    module.write_bytes(bytes(data))
    got = run_cli(*args)
    assert got.returncode == 0 and got.stdout == expected
    assert "damaged" in got.stderr and len(got.stderr.splitlines()) == 1, got.stderr
    again = run_cli(*args)
    assert again.returncode == 0 and again.stdout == expected and again.stderr == ""
    assert [p.read_bytes() != data for p in (cache / "xpu-perf" / "wasm").glob(checked)] == [True]


def test_fuzz_damaged_engine_snapshots_answer_as_the_engine_does(
    trace: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Random byte flips and truncations anywhere in an engine snapshot (header, run table,
    pages, the holes between them): each look answers as a fresh load does, and where the
    snapshot was refused one line says so."""
    import random

    from .test_engine_snapshot import FIRST, NEW, _fresh, _look

    monkeypatch.setattr(engine_snapshot, "MIN_LOAD_S", 0.0)
    rng = random.Random(34)
    expected = _fresh(trace, NEW)
    root = tmp_path / "results"
    _look(trace, root, FIRST)
    (snapshot,) = (tmp_path / "engine").glob("*.heap")
    pristine = snapshot.read_bytes()
    for round_ in range(8):
        data = bytearray(pristine)
        if round_ % 3 == 2:
            del data[rng.randrange(len(data)) :]
        else:
            for _ in range(rng.choice([1, 4])):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        snapshot.write_bytes(bytes(data))
        capsys.readouterr()
        statements = [*NEW, f"select {round_} as round"]  # new: the engine is needed
        answers, loaded, restored = _look(trace, root, statements)
        err = capsys.readouterr().err
        assert loaded
        assert answers[: len(NEW)] == expected[: len(NEW)]
        assert answers[len(NEW) + 1 :] == expected[len(NEW) :]
        assert restored or "not using the cached engine snapshot" in err, err
        snapshot.write_bytes(pristine)
