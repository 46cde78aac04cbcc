"""The limits a Kineto JSON input is read under, checked on its bytes before a parser
builds anything from them: time and memory stay bounded whatever the file holds.

- MAX_DEPTH: containers nested below the document's top-level object (the events array
  is level 1, an event level 2).  orjson, which parses the events, stops at 1,024 levels;
  ijson's prefixes grow with the depth (memory with its square), Python's repr recurses.
- MAX_EVENT_BYTES: the JSON text of one event (an element of a top-level array), and so
  of any string in it; also of any string outside the events.  Strings this long or
  longer are no profiler's, and a parser holds a string whole.
- MAX_MEMBERS: members of an object (an event's args) or elements of an array inside an
  event.  Each arg is a record of the trace, so their number bounds time and memory.

A file past a limit is refused in one line (LimitExceeded: what, and where, as a byte
offset of the JSON text).  The check (JsonGuard) is a streaming scan of the text's
structure: strings and escapes, brackets, commas.  It validates nothing else: what is
invalid JSON is the parser's to report; after a bracket that closes nothing it stops.
"""

from __future__ import annotations

import re
from typing import Protocol

MAX_DEPTH = 1024
MAX_EVENT_BYTES = 1 << 22  # 4 MiB
MAX_MEMBERS = 10_000

# Outside strings: the next structural byte.  Inside: the rest of the string's body, up
# to its closing quote (or the data's end, or a backslash that ends the data).
_TOKEN = re.compile(rb'[\[\]{},"]')
_BODY = re.compile(rb'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)


class LimitExceeded(ValueError):
    """A JSON input past one of the limits above; the message is one line."""


class JsonGuard:
    """Feed it the JSON text in order (`feed`); it raises LimitExceeded at the first
    byte past a limit.  Holds a few counters and one int per open container."""

    def __init__(self, offset: int = 0, depth: int = 0) -> None:
        """`offset`: where the text fed starts in the document; `depth`: the containers
        open there (2: at an event of the events array)."""
        self._offset = offset  # bytes fed before the current data
        self._commas: list[int] = [0] * depth  # per open container
        self._in_string = False
        self._escape = False  # the data ended in a string's backslash
        self._string_start = 0
        self._event_start = -1  # offset of the open event's first byte
        self._broken = False  # a closer that closes nothing: the parser reports it

    def feed(self, data: bytes) -> None:
        if self._broken or not data:
            self._offset += len(data)
            return
        pos, end = 0, len(data)
        commas = self._commas
        while pos < end:
            if self._in_string:
                if self._escape:
                    self._escape = False
                    pos += 1
                    continue
                body = _BODY.match(data, pos)
                stop = body.end() if body is not None else pos
                if stop < end and data[stop] == 0x22:  # the closing quote
                    self._in_string = False
                    self._check_string(self._offset + stop)
                    pos = stop + 1
                    continue
                if stop < end:  # a backslash, the data's last byte
                    self._escape = True
                    stop = end
                self._check_string(self._offset + stop)
                pos = stop
                continue
            found = _TOKEN.search(data, pos)
            if found is None:
                break
            at = found.start()
            byte = data[at]
            pos = at + 1
            if byte == 0x22:  # "
                self._in_string = True
                self._string_start = self._offset + at
            elif byte == 0x2C:  # ,
                if commas:
                    commas[-1] += 1
                    if commas[-1] >= MAX_MEMBERS and len(commas) > 2:
                        self._refuse(
                            f"an event holds an object or array of more than "
                            f"{MAX_MEMBERS:,} members",
                            self._offset + at,
                        )
            elif byte in (0x5B, 0x7B):  # [ {
                commas.append(0)
                if len(commas) == 3:
                    self._event_start = self._offset + at
                elif len(commas) > MAX_DEPTH + 1:
                    self._refuse(f"JSON nested deeper than {MAX_DEPTH:,} levels", self._offset + at)
            else:  # ] }
                if not commas:
                    self._broken = True
                    break
                commas.pop()
                if len(commas) == 2:
                    self._check_event(self._offset + at)
                    self._event_start = -1
        if len(commas) > 2:
            self._check_event(self._offset + end)
        self._offset += end

    def _check_string(self, at: int) -> None:
        if at - self._string_start > MAX_EVENT_BYTES:
            self._refuse(f"a string longer than {MAX_EVENT_BYTES >> 20} MiB", self._string_start)

    def _check_event(self, at: int) -> None:
        if self._event_start >= 0 and at - self._event_start >= MAX_EVENT_BYTES:
            self._refuse(
                f"an event of more than {MAX_EVENT_BYTES >> 20} MiB of JSON text",
                self._event_start,
            )

    def _refuse(self, what: str, at: int) -> None:
        self._broken = True
        raise LimitExceeded(f"{what} (at byte {at:,} of the JSON text)")


class ByteReader(Protocol):
    """A binary stream (a file, plain or gunzipped, or bytes in memory)."""

    def read(self, size: int = -1, /) -> bytes: ...


class GuardedReader:
    """A binary stream whose bytes pass a JsonGuard as they are read (what ijson reads
    through: it never holds more than the limits allow)."""

    def __init__(self, stream: ByteReader, guard: JsonGuard | None = None) -> None:
        self._stream = stream
        self.guard = guard or JsonGuard()

    def read(self, size: int = -1) -> bytes:
        data = self._stream.read(size)
        self.guard.feed(data)
        return data


def check_text(text: bytes) -> None:
    """LimitExceeded if `text` (a whole JSON document, or part of one from its start) is
    past a limit."""
    JsonGuard().feed(text)
