"""What a value of a Kineto trace is as the trace takes it: times in integer ns, pids and
tids as int32 (text ones numbered: `Ids`), ids within their range, names cleaned of what
one run only knew.  Shared by the columns (kineto_columns.py) and the per-event
conversion (kineto_events.py)."""

from __future__ import annotations

import re
from decimal import Decimal

# Times past 2**62 ns (146 years) or ids past int32 are not a profiler's: such an event is
# skipped (times) or its id kept as a name (pid/tid), instead of overflowing the encoder.
MAX_NS = 1 << 62
FLOAT_EXACT_US = (1 << 53) / 1000  # below it, us * 1000.0 rounds to the exact ns
INT32 = range(-(1 << 31), 1 << 31)
INT32_MIN, INT32_END = -(1 << 31), 1 << 31
CORRELATIONS = range(0, 1 << 32)
STREAMS = range(-(1 << 31), 1 << 32)  # int32 or uint32 (CUDA's no-stream 2**32-1)


def time_ns(value: object) -> int | None:
    """A Kineto time or duration in ns, or None where it is no number the trace can hold."""
    if type(value) is float and -FLOAT_EXACT_US < value < FLOAT_EXACT_US:
        return round(value * 1000.0)  # the common case, first (the same value as below)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    ns = value * 1000.0
    if not -MAX_NS < ns < MAX_NS:  # also false for NaN
        return None
    if isinstance(value, int):
        return value * 1000  # exact: epoch-based times (1.7e15 us) are past float precision
    if -FLOAT_EXACT_US < value < FLOAT_EXACT_US:
        return round(ns)
    # A large time with decimals: its shortest text times 1000, not the float product
    # (which is off by up to 64 ns at 1.7e15 us).
    return round(Decimal(repr(value)) * 1000)


def _int_or_none(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def id_or_none(value: object, valid: range) -> int | None:
    """An integer id (also as text, decimal or 0x hex: ROCm writes `"stream": "0x0"`)
    within `valid`, else None."""
    if isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            return None
    as_int = _int_or_none(value)
    return as_int if as_int is not None and as_int in valid else None


# Kineto of 2021 (PyTorch 1.8-1.9, the TensorBoard plugin's samples) wrote every tid as
# text: a CPU thread's number ("5504") and a GPU stream ("stream 7"), with its flow events'
# tids as numbers ("tid": 5504) or the same text.  They are the numbers they spell.
_TEXT_ID = re.compile(r"(?:stream )?([0-9]{1,10})")


def text_id(value: str) -> int | None:
    """The int32 a text pid or tid spells ("5504", "stream 7"), else None."""
    m = _TEXT_ID.fullmatch(value)
    if m is None:
        return None
    number = int(m[1])
    return number if number < INT32_END else None


# What a name says of one run only, left out so that the same code has one name: an
# object's address (`<built-in method mean of Tensor object at 0x7f...>`), and Kineto's
# line 0 of a python_function (`h.py(0): fn`: it had no line; report would show `h.py:0`).
_OBJECT_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+>")
_NO_LINE = re.compile(r"^(.*?\.py)\(0\): ")


def clean_name(name: str) -> str:
    """`name` without an object address or a line 0 (see above)."""
    if " at 0x" in name:
        name = _OBJECT_ADDRESS.sub(">", name)
    if "(0): " in name:
        name = _NO_LINE.sub(r"\1: ", name)
    return name


class Ids:
    """Kineto uses strings as pid/tid for its own pseudo-tracks ("Spans", "Traces");
    Perfetto needs integers, so such names get stable synthetic ids (and keep the name).
    Text that spells a number (text_id) is that number."""

    def __init__(self) -> None:
        self._synthetic: dict[str, int] = {}
        self.names: dict[int, str] = {}

    def get(self, value: object) -> int:
        if type(value) is int and -(1 << 31) <= value < 1 << 31:
            return value  # the common case, first
        as_int = _int_or_none(value) if type(value) is not str else text_id(value)
        if as_int is not None and as_int in INT32:
            return as_int
        text = str(value)
        ident = self._synthetic.get(text)
        if ident is None:
            ident = self._synthetic[text] = 0x7F000000 + len(self._synthetic)
            self.names[ident] = text
        return ident


def flow_ident(ident: int | float | str) -> int | str:
    """A flow id as written: numbers that are integers as int, anything else as text."""
    if isinstance(ident, str):
        return ident
    as_int = _int_or_none(ident)
    return as_int if as_int is not None else repr(ident)
