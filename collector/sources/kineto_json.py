"""The items of a Kineto trace's `traceEvents` array, read three times faster than ijson.

What `trace_events` yields is what `ijson.items(file, "traceEvents.item", use_float=True)`
yields (ijson's C backend, the parser convert was built on), with the same errors, in
bounded memory.  The fast way: orjson parses the events a run of ~64 KiB at a time,
`"[" + run + "]"` (runs of whole events, their objects still in the CPU caches; one parse
of the whole file holds it all and is slower than ijson).

Where a run ends is found without a second parser: a candidate is an object's `}` followed
by a comma and the next object's `{` (`_BOUNDARY`), and the parse of the run up to it
decides.  The run starts at an element of the array; so if the candidate is inside a
string, the parse ends inside that string, and if it closes an object nested in an event,
the parse ends inside the event: either way it fails, at or past the run's end, and the
next candidate is tried.  A parse that succeeds ends at an element boundary of the array,
and its items are the array's.  A parse that fails inside the run may have met the
array's end (a `}, {` in the document's tail): the rest of the file is then read as its
last run.  The document around the array (its head, up to `"traceEvents": [`, and its
tail after the `]`) is checked by ijson itself: one top-level `traceEvents` key, the rest
valid.

What orjson reads otherwise than ijson is left to ijson: integers of 19 digits or more
(orjson reads past int64 as uint64 or float, ijson rejects them), anything orjson rejects
(lone surrogates, which ijson replaces; invalid JSON, which ijson reports), a run or a
head or tail larger than _MAX_RUN, an error of the file (truncated gzip).  Then ijson reads
the file again from its start and the items already yielded are skipped: the consumer
sees ijson's items and ijson's error (before the error of a file ijson rejects, maybe a
few items more than ijson gives, from whole runs orjson read: convert fails all the same
and keeps nothing).  A run with a long digit string (in a name, say) is read by ijson
alone, from its text.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from typing import Protocol

import ijson
import orjson

from collector.sources.json_limits import (
    MAX_EVENT_BYTES,
    MAX_MEMBERS,
    ByteReader,
    GuardedReader,
    JsonGuard,
)
from collector.sources.json_value import JsonValue


class ByteStream(ByteReader, Protocol):
    """The stream parsed: a binary file, plain or gunzipped."""

    def close(self) -> None: ...


class FilePosition(Protocol):
    """The file under the stream: its position is the progress."""

    def tell(self) -> int: ...


# (the stream to parse, the file under it: its position is the progress, in the bytes
# stored, compressed or not)
Opener = Callable[[], tuple[ByteStream, FilePosition]]

# Bytes of events per orjson parse: smaller runs parse faster an event, up to a point (the
# objects of a smaller run stay in the CPU caches; docs/benchmarks.md has the sizes tried).
_RUN = 1 << 16
# Bytes read at a time (each read moves the unparsed rest of the buffer once).
_READ = 1 << 20
# A run, head or tail larger than this (no boundary found: events of another layout, or
# something that is not JSON) is left to ijson, so memory stays bounded.  The limit of an
# event's text (json_limits.py): no event the fast reader yields is past it.
_MAX_RUN = MAX_EVENT_BYTES
_KEY = re.compile(rb'"traceEvents"\s*:\s*\[')
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
# Digits to "0", everything else to " ": 19 zeros in a row are a number (or a digit
# string) orjson may read otherwise than ijson.  A translate and a find: C speed per byte.
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x20 for b in range(256))
_LONG_NUMBER = b"0" * 19
_PROGRESS_EVERY = 4096
_IJSON_RUN = 256  # items of ijson's per list of trace_event_runs()


class _NotSure(Exception):
    """The fast reader cannot vouch for the rest: ijson reads it."""


class _ArrayMayEnd(Exception):
    """A run's parse failed inside the run: the array ends there, or the events are
    something only ijson can read."""


def trace_events(
    open_file: Opener, progress: Callable[[int], None] | None = None
) -> Iterator[JsonValue]:
    """The items of the top-level `traceEvents` array, in order (see the module doc).

    Raises what ijson raises for a file it cannot read (ijson.JSONError and
    IncompleteJSONError, UnicodeDecodeError), the file's own errors (EOFError,
    zlib.error, gzip.BadGzipFile), and LimitExceeded for a file past json_limits.py's
    limits (before anything past them is parsed)."""
    for items in trace_event_runs(open_file, progress):
        yield from items


def trace_event_runs(
    open_file: Opener, progress: Callable[[int], None] | None = None
) -> Iterator[list[JsonValue]]:
    """trace_events()'s items a list at a time (a run of orjson's, or up to _IJSON_RUN
    items of ijson's), for a consumer that works on many at once."""
    reported = 0

    def advance(raw: FilePosition) -> None:
        nonlocal reported
        pos = raw.tell()
        if progress is not None and pos > reported:
            progress(pos - reported)
            reported = pos

    yielded = 0
    stream, raw = open_file()
    try:
        reader = _FastReader(stream)
        for items in reader.runs():
            yield items
            yielded += len(items)
            advance(raw)
        return
    except _NotSure:
        pass
    finally:
        stream.close()
    stream, raw = open_file()
    try:
        run: list[JsonValue] = []
        try:
            # ijson reads what passed the limits: its prefixes, strings and objects
            # stay bounded.
            guarded = GuardedReader(stream)
            for n, item in enumerate(ijson.items(guarded, "traceEvents.item", use_float=True)):
                if n >= yielded:
                    run.append(item)
                    if len(run) >= _IJSON_RUN:
                        yield _ijson_nul_escaped(run)
                        run = []
                if n % _PROGRESS_EVERY == 0:
                    advance(raw)
        except Exception:
            if run:  # the items before ijson's error, as trace_events() has them
                yield _ijson_nul_escaped(run)
            raise
        if run:
            yield _ijson_nul_escaped(run)
        advance(raw)
    finally:
        stream.close()


class _FastReader:
    """The array's runs of items, parsed by orjson; _NotSure where ijson must decide."""

    def __init__(self, stream: ByteStream) -> None:
        self._stream = stream
        self._buf = b""
        self._pos = 0  # where the unread events start in _buf
        self._base = 0  # where _buf starts in the text
        self._eof = False

    def runs(self) -> Iterator[list[JsonValue]]:
        head = self._head()
        while True:
            if len(self._buf) - self._pos < 2 * _RUN:
                self._fill(_READ)
            buf, pos = self._buf, self._pos
            search_from = pos + _RUN
            while True:
                cut = _BOUNDARY.search(buf, search_from)
                if cut is None:
                    if self._eof:
                        yield self._last(head)
                        return
                    if len(buf) - pos > _MAX_RUN:
                        raise _NotSure
                    kept = len(buf) - pos  # the buffer restarts at _pos
                    self._fill(kept + _RUN)
                    buf, pos = self._buf, self._pos
                    # A candidate may straddle the old end: search its last bytes again.
                    search_from = max(_RUN, kept - 64)
                    continue
                end = cut.start() + 1
                if end - pos > _MAX_RUN:
                    raise _NotSure
                try:
                    items = _parse_run(memoryview(buf)[pos:end])
                except _ArrayMayEnd:
                    # The array may end in this run (a `}, {` in the document's tail):
                    # the rest of the file, bounded, read as its end.
                    while not self._eof and len(self._buf) - self._pos <= _MAX_RUN:
                        self._fill(len(self._buf) - self._pos + _READ)
                    if not self._eof:
                        raise _NotSure from None
                    yield self._last(head)
                    return
                if items is not None:
                    _check_run(buf, pos, end, self._base + pos)
                    self._pos = cut.end() - 1  # at the next event's `{`
                    yield items
                    break
                search_from = end

    def _fill(self, need: int) -> None:
        """Read until `need` bytes past _pos are buffered, or the end of the file."""
        buf = self._buf[self._pos :]
        self._base += self._pos
        self._pos = 0
        parts = [buf]
        have = len(buf)
        while have < need and not self._eof:
            try:
                block = self._stream.read(max(_READ, need - have))
            except Exception as exc:  # a truncated or corrupt file: ijson reports it
                raise _NotSure from exc
            if not block:
                self._eof = True
                break
            parts.append(block)
            have += len(block)
        self._buf = b"".join(parts)

    def _head(self) -> bytes:
        """The document up to the array's `[` (exclusive), checked: a top-level key."""
        while True:
            found = _KEY.search(self._buf)
            if found is not None:
                break
            if self._eof or len(self._buf) > _MAX_RUN:
                raise _NotSure  # no array where expected: ijson says what the file is
            self._fill(len(self._buf) + _RUN)
        head = self._buf[: found.end() - 1]
        self._pos = found.end()
        JsonGuard().feed(head)
        # `null}` closes the top-level object only if the key is one of its own (inside a
        # string or a nested object, ijson finds the document incomplete).
        _check_document(head + b"null}")
        return head

    def _last(self, head: bytes) -> list[JsonValue]:
        """The events after the last boundary, and the document's tail, checked."""
        if len(self._buf) - self._pos > _MAX_RUN:
            raise _NotSure
        rest = b"[" + self._buf[self._pos :]
        try:
            orjson.loads(rest)
        except orjson.JSONDecodeError as exc:
            after = exc.pos  # the array parsed; the tail starts here
        else:
            raise _NotSure  # the document ends with the array: invalid, ijson says so
        try:
            items = _loads(rest[:after])
        except orjson.JSONDecodeError:
            raise _NotSure from None
        _check_run(rest, 1, after, self._base + self._pos)
        # (The `]` that ends the array closes the guard's second level.)
        JsonGuard(self._base + self._pos + after - 2, depth=2).feed(rest[after - 1 :])
        _check_document(head + b"null" + rest[after:])
        return items


def _check_run(buf: bytes, pos: int, end: int, offset: int) -> None:
    """LimitExceeded where the events of buf[pos:end] (parsed; `offset`: where they start
    in the text) are past a limit: only an object or array of too many members can be (a
    run is no longer than an event may be, and orjson parses no deeper than events may
    nest).  Such a run has as many commas: the others are not scanned."""
    if buf.count(b",", pos, end) >= MAX_MEMBERS:
        JsonGuard(offset, depth=2).feed(buf[pos:end])


def _parse_run(text: memoryview) -> list[JsonValue] | None:
    """The items of `text`, elements of the array from one of its elements on, if it ends
    at an element boundary (else None); _ArrayMayEnd where it fails inside, _NotSure where
    only ijson can say."""
    try:
        return _loads(b"".join((b"[", text, b"]")))
    except orjson.JSONDecodeError as exc:
        if exc.pos <= len(text):  # the text itself fails, not its end
            raise _ArrayMayEnd from None
        return None


def _loads(array: bytes) -> list[JsonValue]:
    """The items of the JSON array `array` (orjson.JSONDecodeError if it is none)."""
    items: JsonValue = orjson.loads(array)
    if type(items) is not list:
        raise _NotSure
    if _LONG_NUMBER in array.translate(_DIGITS):
        # Maybe an integer past int64, which orjson reads as a float: ijson's own reading
        # of these events (the cut is sound: orjson parsed them).
        try:
            items = list(ijson.items(io.BytesIO(array), "item", use_float=True))
        except Exception as exc:
            raise _NotSure from exc
    if _NUL in array:
        items = nul_escaped(items)
    return items


# A NUL in a JSON string (`\u0000` in its text): the trace's readers end a string at a
# NUL, so it is written as the six characters of its JSON escape instead (a name is never
# cut short, and reads back as the input wrote it).
_NUL = b"\\u0000"
NUL_TEXT = "\\u0000"


def nul_escaped(items: list[JsonValue]) -> list[JsonValue]:
    """`items`, with every NUL in their strings (keys too) as NUL_TEXT, in place (a walk,
    no recursion: values nest up to json_limits.MAX_DEPTH levels)."""
    stack: list[list[JsonValue] | dict[str, JsonValue]] = [items]
    while stack:
        container = stack.pop()
        if isinstance(container, dict):
            entries = list(container.items())
            container.clear()
            for key, item in entries:
                if type(key) is str and "\0" in key:
                    key = key.replace("\0", NUL_TEXT)
                if type(item) is str:
                    if "\0" in item:
                        item = item.replace("\0", NUL_TEXT)
                elif isinstance(item, (list, dict)):
                    stack.append(item)
                container[key] = item
        else:
            for i, item in enumerate(container):
                if type(item) is str:
                    if "\0" in item:
                        container[i] = item.replace("\0", NUL_TEXT)
                elif isinstance(item, (list, dict)):
                    stack.append(item)
    return items


def _ijson_nul_escaped(run: list[JsonValue]) -> list[JsonValue]:
    """nul_escaped() where a run of ijson's items has a NUL (orjson's text of the run
    tells; a run orjson cannot write is walked)."""
    try:
        if _NUL not in orjson.dumps(run):
            return run
    except TypeError:
        pass
    return nul_escaped(run)


def _check_document(document: bytes) -> None:
    """ijson reads `document` (the file with its events array replaced by null, its
    parts checked against the limits) without an error and finds one top-level
    `traceEvents` key, else _NotSure."""
    keys = 0
    try:
        for prefix, event, value in ijson.parse(io.BytesIO(document), use_float=True):
            if not prefix and event == "map_key" and value == "traceEvents":
                keys += 1
    except Exception as exc:
        raise _NotSure from exc
    if keys != 1:
        raise _NotSure
