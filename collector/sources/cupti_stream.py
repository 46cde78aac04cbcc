"""Decoder of the CUPTI injection stream (cupti-<pid>.xpstream), schema protos/cupti_stream.def.

The schema file is the one definition of the format: the C library includes it as X-macros,
this module parses it.  Columns decode in bulk with `array.frombytes` (no per-value Python
work), so a stream of a million kernels reads in well under a second.
"""

from __future__ import annotations

import array
import os
import re
import struct
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from collector import model
from collector.owned_files import RejectedFile, read_owned

SCHEMA_PATH = Path(__file__).resolve().parent.parent.parent / "protos" / "cupti_stream.def"
MAGIC = b"XPUPERF\0"
FORMAT_VERSION = 1
_HEADER = struct.Struct("<III")
_FIXED = {"U32": "I", "I32": "i", "U64": "Q", "F64": "d"}
REJECTS_SAID = 10  # rejected files said one per line; a line for the rest


class StreamError(Exception):
    """A stream file is not a readable xpu-perf CUPTI stream."""


@dataclass(frozen=True)
class ChunkSchema:
    name: str
    type_id: int
    columns: tuple[tuple[str, str], ...]  # (column, kind) in wire order


def load_schema(path: Path = SCHEMA_PATH) -> dict[int, ChunkSchema]:
    """Chunk schemas by type id, parsed from the X-macro file."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    chunks: dict[int, ChunkSchema] = {}
    current: tuple[str, int] | None = None
    columns: list[tuple[str, str]] = []
    for m in re.finditer(r"XP_(CHUNK|COL|END)\(([^)]*)\)", text):
        args = [a.strip() for a in m.group(2).split(",")]
        if m.group(1) == "CHUNK":
            current, columns = (args[0], int(args[1])), []
        elif m.group(1) == "COL":
            columns.append((args[1], args[2]))
        elif current is not None:
            chunks[current[1]] = ChunkSchema(current[0], current[1], tuple(columns))
            current = None
    return chunks


@dataclass
class Table:
    """All rows of one chunk type in a stream, column by column."""

    columns: dict[str, list | array.array] = field(default_factory=dict)
    rows: int = 0

    def __getitem__(self, column: str) -> list | array.array:
        """A column's values; empty when the stream had no chunk of this type."""
        return self.columns.get(column, [])

    def numbers(self, column: str) -> array.array:
        """A fixed-width column's values (U32, I32, U64, F64) as they were read, for numpy
        to take without a copy; empty when the stream had no chunk of this type."""
        values = self.columns.get(column)
        if values is None:
            return array.array("B")
        if not isinstance(values, array.array):
            raise StreamError(f"column {column} is not a fixed-width one")
        return values


@dataclass
class Stream:
    """One process's decoded stream."""

    path: Path
    tables: dict[str, Table]
    truncated: bool = False  # the file ended inside a chunk (process killed mid-write)

    def table(self, name: str) -> Table:
        return self.tables.get(name) or Table()


def _array(code: str, data: bytes) -> array.array:
    a = array.array(code)
    a.frombytes(data)
    if sys.byteorder != "little":
        a.byteswap()
    return a


def _decode_chunk(schema: ChunkSchema, rows: int, payload: memoryview, table: Table) -> None:
    pos = 0
    for column, kind in schema.columns:
        if kind in _FIXED:
            width = 8 if kind in ("U64", "F64") else 4
            values = _array(_FIXED[kind], payload[pos : pos + width * rows].tobytes())
            pos += width * rows
            dest = table.columns.setdefault(column, array.array(_FIXED[kind]))
            dest.extend(values)
            continue
        counts = _array("I", payload[pos : pos + 4 * rows].tobytes())
        pos += 4 * rows
        dest_list = table.columns.setdefault(column, [])
        if kind == "STR":
            for n in counts:
                dest_list.append(bytes(payload[pos : pos + n]).decode("utf-8", "replace"))
                pos += n
        else:
            width, code = (8, "Q") if kind == "U64LIST" else (4, "I")
            for n in counts:
                dest_list.append(_array(code, payload[pos : pos + width * n].tobytes()))
                pos += width * n
    table.rows += rows


def read_stream(path: Path, schema: dict[int, ChunkSchema] | None = None) -> Stream:
    """One stream file; a RejectedFile when it is not a regular file its directory's owner
    wrote (the target's user may plant anything where it writes: collector/owned_files.py)."""
    schema = schema or load_schema()
    data = memoryview(read_owned(path))
    if len(data) < 16 or bytes(data[:8]) != MAGIC:
        raise StreamError(f"{path}: not an xpu-perf CUPTI stream")
    (version,) = struct.unpack_from("<I", data, 8)
    if version != FORMAT_VERSION:
        raise StreamError(f"{path}: stream format {version}, this reader knows {FORMAT_VERSION}")
    tables: dict[str, Table] = {}
    pos = 16
    truncated = False
    while pos < len(data):
        if pos + _HEADER.size > len(data):
            truncated = True
            break
        type_id, rows, size = _HEADER.unpack_from(data, pos)
        pos += _HEADER.size
        if pos + size > len(data):
            truncated = True
            break
        chunk = schema.get(type_id)
        if chunk is not None:  # unknown chunk types are skipped (newer writer)
            _decode_chunk(
                chunk, rows, data[pos : pos + size], tables.setdefault(chunk.name, Table())
            )
        pos += size
    return Stream(path, tables, truncated)


def process_info(proc: Table) -> model.ProcessInfo:
    """The process of a stream's PROCESS chunk (both libraries write it, stream.c), named after
    its command (else its executable) and, when a launcher set one, its rank.  Streams written
    before the rank columns existed decode them as empty: no rank."""
    cmdline = tuple(a for a in proc["cmdline"][0].split("\0") if a)
    name = os.path.basename(cmdline[0] if cmdline else proc["exe"][0])

    def first(column: str) -> int | None:
        values = proc[column]
        return int(values[0]) if len(values) else None

    return model.ranked_process(
        int(proc["pid"][0]),
        name,
        cmdline,
        first("rank"),
        first("local_rank"),
        first("world_size"),
    )


def read_streams(paths: Iterable[Path], counts: Counter[str]) -> Iterator[Stream]:
    """The readable streams of `paths`; unreadable and truncated ones are counted (`streams`,
    `streams_unreadable`, `streams_truncated`), an unreadable one said in one line.  A file
    that is no stream its process wrote (a FIFO, a link, another user's) is not read at all:
    counted (`streams_rejected`), each said in one line (the first REJECTS_SAID, then one
    line for the rest)."""
    rejected = 0
    for path in paths:
        try:
            stream = read_stream(path)
        except RejectedFile as exc:
            rejected += 1
            counts["streams_rejected"] += 1
            if rejected <= REJECTS_SAID:
                print(f"xpu-perf: rejected {exc} (not read: not a stream its process wrote)",
                      file=sys.stderr)  # fmt: skip
            continue
        except (OSError, StreamError) as exc:
            counts["streams_unreadable"] += 1
            print(f"xpu-perf: skipping {path.name}: {exc}", file=sys.stderr)
            continue
        counts["streams"] += 1
        counts["streams_truncated"] += int(stream.truncated)
        yield stream
    if rejected > REJECTS_SAID:
        print(f"xpu-perf: rejected {rejected - REJECTS_SAID} more such files", file=sys.stderr)


def process_events(stream: Stream, counts: Counter[str]) -> tuple[int, list[model.Event]] | None:
    """The pid and the process and thread events of a stream (both libraries write them), or
    None for a stream without its PROCESS chunk (counted as `streams_without_process`)."""
    proc = stream.table("PROCESS")
    if proc.rows == 0:
        counts["streams_without_process"] += 1
        return None
    pid = int(proc["pid"][0])
    threads = stream.table("THREAD")
    return pid, [
        process_info(proc),
        *(
            model.ThreadInfo(pid, tid, name)
            for tid, name in zip(threads["tid"], threads["name"], strict=True)
        ),
    ]


# What each kind of rows a stream could not write is called (UNWRITTEN rows_<CHUNK>,
# protos/cupti_stream.def), summed over streams as `unwritten_<what>`: the events the
# summary names; every other chunk type is summed as `unwritten_other_rows`.
UNWRITTEN_EVENTS = {
    "CPU_SAMPLE": "cpu_samples",
    "WAIT": "waits",
    "API": "gpu_records",
    "KERNEL": "gpu_records",
    "MEMCPY": "gpu_records",
    "MEMSET": "gpu_records",
    "SYNC": "gpu_records",
    "MARKER": "gpu_records",
    "MEMORY": "gpu_records",
    "PM_SAMPLE": "gpu_records",
}


def count_unwritten(stream: Stream, counts: Counter[str]) -> bool:
    """Adds what the stream's library could not write (its UNWRITTEN block, rewritten in place
    by the final flush, so it survives a full disk) to `counts`: `unwritten_<what>` rows
    (UNWRITTEN_EVENTS) and `unwritten_rows_<chunk>` (each chunk type: `_kernel`, `_api`),
    `unwritten_chunks`, `unwritten_bytes`.  True when the final flush
    rewrote the block: the process ended normally, even if its final counters were lost."""
    block = stream.table("UNWRITTEN")
    if not block.rows:
        return False
    values = dict(zip(block["name"], block["value"], strict=True))
    for name, value in values.items():
        if name.startswith("rows_") and value:
            chunk = name.removeprefix("rows_")
            counts[f"unwritten_{UNWRITTEN_EVENTS.get(chunk, 'other_rows')}"] += value
            counts[f"unwritten_rows_{chunk.lower()}"] += value  # each kind, e.g. _kernel
    counts["unwritten_chunks"] += values.get("chunks", 0)
    counts["unwritten_bytes"] += values.get("bytes", 0)
    return bool(values.get("final", 0))
