"""A trace too big for the embedded engine (issue 24): one line that says what to do, exit 2,
no traceback, no hang; whether it happens while loading or while a command builds its
tables.  The engine's 4 GiB wasm heap is lowered with XPU_PERF_ENGINE_HEAP_MB so a small
trace meets the same path a trace of ten million slices meets."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from exporters.perfetto.engine import wasm_engine
from exporters.perfetto.engine.trace_processor import QueryError, TraceOpenError, open_trace

from .conftest import REPO


def _cli(env: dict[str, str], *args: str | Path) -> tuple[int, str, str]:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "collector.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=300,
    )
    return proc.returncode, proc.stdout, proc.stderr


def _check_line(err: str) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert "too big for the embedded trace_processor" in err
    for advice in ("--trace-processor", "--capture-range", "--window"):
        assert advice in err


@pytest.mark.parametrize("command", ["query", "report", "folded"])
def test_loading_past_the_heap_is_one_line(example_trace: Path, command: str) -> None:
    args: list[str | Path] = [command, example_trace, "--no-cache"]
    if command == "query":
        args.insert(2, "select count(*) from slice")
    rc, out, err = _cli({wasm_engine.ENV_HEAP_MB: "8"}, *args)
    assert rc == 2
    assert out == ""
    _check_line(err)
    assert f"cannot load {example_trace}" in err


def test_tables_past_the_heap_are_one_line(
    example_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_trace(example_trace) as t:
        loaded = t.engine_heap_bytes()
    assert loaded is not None
    # Room for the trace, not for a table of every pair of its slices (~100 MB).
    monkeypatch.setenv(wasm_engine.ENV_HEAP_MB, str(loaded // 2**20 + 8))
    with open_trace(example_trace) as t:
        assert t.scalar("select count(*) from slice") > 1000
        with pytest.raises(QueryError) as err:
            t.execute(
                "create perfetto table pairs as select a.id as a, b.id as b "
                "from slice a cross join slice b"
            )
    _check_line(str(err.value))


def test_a_heap_that_fits_changes_nothing(
    example_trace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_trace(example_trace) as t:
        expected = t.query("select count(*) as n, sum(dur) as d from slice")
    monkeypatch.setenv(wasm_engine.ENV_HEAP_MB, "512")
    with open_trace(example_trace) as t:
        assert t.query("select count(*) as n, sum(dur) as d from slice") == expected
    monkeypatch.setenv(wasm_engine.ENV_HEAP_MB, "1")
    with pytest.raises(TraceOpenError):
        open_trace(example_trace)


class _BigStreams:
    """A source whose target wrote `size` bytes of streams (and no events)."""

    name = "cupti"

    def __init__(self, size: int) -> None:
        self.size = size

    def recorded_bytes(self) -> int:
        return self.size

    def target_env(self) -> dict[str, str]:
        return {}

    def start(self) -> None: ...

    def target_started(self, pid: int) -> None: ...

    def stop(self) -> None: ...

    def events(self) -> list[object]:
        return []

    def stats(self) -> dict[str, int]:
        return {}


@pytest.mark.parametrize("over", [False, True])
def test_record_warns_before_writing_a_trace_too_big(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], over: bool
) -> None:
    from collector.recording.trace import write_trace
    from exporters.perfetto import engine_limit

    limit = engine_limit.ANALYSED_UP_TO * engine_limit.STREAM_BYTES_PER_SLICE
    size = limit + 10**6 if over else limit - 10**6
    out = tmp_path / "run.perfetto-trace"
    write_trace(out, [_BigStreams(size)], ["xpu-perf", "record"])  # type: ignore[list-item]
    err = capsys.readouterr().err
    assert out.exists()  # warned, then written all the same
    if over:
        assert err.count("\n") == 1 and "warning" in err
        assert "more than `report` and `folded` have room for in the embedded" in err
        assert "--trace-processor" in err and "--capture-range" in err
    else:
        assert err == ""


@pytest.mark.parametrize("at_ceiling", [True, False])
def test_a_trap_with_the_heap_at_its_ceiling_is_out_of_memory(at_ceiling: bool) -> None:
    """The allocator may fail without asking the host for more heap (it knows the maximum):
    then only the trap says so.  With the heap grown to its ceiling that is out of memory;
    below it, a crash."""
    import wasmtime

    from exporters.perfetto.engine_limit import EngineMemoryError

    transport = wasm_engine.WasmTransport()
    heap = transport.heap_bytes()
    transport._heap_max = heap if at_ceiling else heap * 2

    def trap(*_args: object) -> None:
        raise wasmtime.Trap("wasm `unreachable` instruction executed")

    transport._on_request = trap
    with pytest.raises(wasm_engine.WasmEngineError if not at_ceiling else EngineMemoryError):
        transport.send(b"\x00")
    # The instance is not used again after a trap.
    with pytest.raises(wasm_engine.WasmEngineError, match="stopped earlier"):
        transport.send(b"\x00")
    transport.close()
