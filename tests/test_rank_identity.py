"""Rank identity without a launcher at hand: a converted Kineto trace of a torch.distributed
job names its process after the rank (`distributedInfo`), and streams written before the
rank columns existed still decode (no rank).  The recorded side, a launcher's environment
read by the injection library, is in tests/test_cupti_fake.py."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from collector.sources.cupti_stream import MAGIC, load_schema, process_info, read_stream
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views

from .conftest import run_cli


def kineto(path: Path, head: dict) -> Path:
    doc = {
        **head,
        "traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "python"}},
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 7,
                "tid": 7,
                "ts": 10,
                "dur": 5,
            },
        ],
    }
    path.write_text(json.dumps(doc))
    return path


def test_distributed_info_names_the_rank(tmp_path: Path) -> None:
    src = kineto(
        tmp_path / "r5.json",
        {"distributedInfo": {"backend": "nccl", "rank": 5, "world_size": 16}, "hostname": "n1"},
    )
    out = tmp_path / "r5.perfetto-trace"
    run_cli("convert", src, "-o", out, "-q", check=True)
    with open_trace(out) as t:
        load_views(t)
        assert t.query("select pid, name, rank, local_rank, world_size from xpu_process") == [
            {"pid": 7, "name": "rank 5 (python)", "rank": 5, "local_rank": None, "world_size": 16}
        ]
        assert t.scalar("select string_value from xpu_metadata where key = 'host'") == "n1"


def test_trace_without_distributed_info_keeps_its_names(tmp_path: Path) -> None:
    out = tmp_path / "plain.perfetto-trace"
    run_cli("convert", kineto(tmp_path / "plain.json", {}), "-o", out, "-q", check=True)
    with open_trace(out) as t:
        load_views(t)
        assert t.query("select name, rank, world_size from xpu_process") == [
            {"name": "python", "rank": None, "world_size": None}
        ]
        assert t.scalar("select count(*) from xpu_metadata where key = 'host'") == 0


def test_stream_without_rank_columns_decodes_without_rank(tmp_path: Path) -> None:
    """A PROCESS chunk as the library wrote it before the rank columns: six columns."""
    (schema,) = [c for c in load_schema().values() if c.name == "PROCESS"]
    exe, cmd = b"/usr/bin/python3", b"python3\0train.py"
    payload = struct.pack("<IIQQ", 42, 1, 5, 6)
    payload += struct.pack("<I", len(exe)) + exe + struct.pack("<I", len(cmd)) + cmd
    path = tmp_path / "cupti-42.xpstream"
    path.write_bytes(
        MAGIC
        + struct.pack("<II", 1, 0)
        + struct.pack("<III", schema.type_id, 1, len(payload))
        + payload
    )
    proc = process_info(read_stream(path).table("PROCESS"))
    assert (proc.pid, proc.name, proc.cmdline, proc.args) == (
        42,
        "python3",
        ("python3", "train.py"),
        (),
    )
