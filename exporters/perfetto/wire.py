"""Protobuf wire format, the few pieces the writer's hand-built packets need.

The writer encodes its hot packets (slice BEGIN/END, instants, perf samples) directly as
bytes instead of building upb messages field by field: a packet is mostly constant
prefixes (per track, per interned name, per annotation name) joined around a few
varints.  Everything here is plain protobuf encoding of `perfetto_trace_pb2` fields;
tests/test_wire.py checks each hand-built packet against the upb-built message.
"""

from __future__ import annotations

import struct

# Wire types.
VARINT = 0
FIXED64 = 1
LEN = 2

# TracePacket fields.
PACKET_TIMESTAMP = 8
PACKET_SEQUENCE_ID = 10
PACKET_TRACK_EVENT = 11
PACKET_INTERNED_DATA = 12
PACKET_SEQUENCE_FLAGS = 13
PACKET_COMPRESSED = 50
PACKET_TIMESTAMP_CLOCK_ID = 58
PACKET_PERF_SAMPLE = 66
PACKET_THREAD_DESCRIPTOR = 44
PACKET_STREAMING_PROFILE = 54
# Trace.packet
TRACE_PACKET = 1
# TrackEvent fields.
EVENT_CATEGORY_IIDS = 3
EVENT_DEBUG_ANNOTATIONS = 4
EVENT_TYPE = 9
EVENT_NAME_IID = 10
EVENT_TRACK_UUID = 11
EVENT_FLOW_IDS = 47  # fixed64
EVENT_TERMINATING_FLOW_IDS = 48  # fixed64
# DebugAnnotation fields.
ANNOTATION_NAME_IID = 1
ANNOTATION_BOOL = 2
ANNOTATION_INT = 4
ANNOTATION_DOUBLE = 5
ANNOTATION_STRING_IID = 17
# PerfSample fields.
SAMPLE_CPU = 1
SAMPLE_PID = 2
SAMPLE_TID = 3
SAMPLE_CALLSTACK_IID = 4
# StreamingProfilePacket fields (launch stacks, see launch_stacks.py).
PROFILE_CALLSTACK_IID = 1
PROFILE_TIMESTAMP_DELTA_US = 2
PROFILE_PROCESS_PRIORITY = 3

# The range of an int64 field (a DebugAnnotation's int_value); larger ints go as text.
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1

_SMALL_LIMIT = 1 << 14
# Every varint below 2**14 (one or two bytes), ready-made: timestamp deltas, lengths,
# iids and most argument values hit this table.
_SMALL: list[bytes] = [
    bytes((n,)) if n < 0x80 else bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(_SMALL_LIMIT)
]
SMALL = _SMALL
_LOW7_CONTINUED = [bytes((n | 0x80,)) for n in range(0x80)]
_U64 = 1 << 64
# What the functions that take encoded bytes accept: bytes, deflate's bytearray, a view of a
# chunk.  Spelled out for mypyc (bench/mypyc_build.py), whose compiled functions check
# their arguments' types: `bytes` alone would refuse deflate's bytearray.
Buffer = bytes | bytearray | memoryview


def varint3(n: int) -> bytes:
    """varint() of 2**7 <= n < 2**21 (two or three bytes), from the tables."""
    return _LOW7_CONTINUED[n & 0x7F] + _SMALL[n >> 7]


def varint(n: int) -> bytes:
    """Base-128 varint of `n`; negative values as their 64-bit two's complement (int64)."""
    if 0 <= n < _SMALL_LIMIT:
        return _SMALL[n]
    if 0 < n < 1 << 21:
        return _LOW7_CONTINUED[n & 0x7F] + _SMALL[n >> 7]
    if n < 0:
        n += _U64
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(data: Buffer, pos: int) -> tuple[int, int]:
    """The varint at data[pos:] and the position after it; IndexError when it runs past the
    end (a reader of streamed or truncated data decides what that means)."""
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def key(field: int, wire_type: int) -> bytes:
    """The tag of a field: varint of (field number << 3 | wire type)."""
    return varint(field << 3 | wire_type)


def varint_field(field: int, value: int) -> bytes:
    return key(field, VARINT) + varint(value)


def len_field(field: int, payload: Buffer) -> bytes:
    return key(field, LEN) + varint(len(payload)) + payload


def frame(payload: Buffer) -> bytes:
    """One serialized TracePacket framed as `Trace.packet`, as it goes into the file."""
    return len_field(TRACE_PACKET, payload)


def event_head(kind: int, uuid: int) -> bytes:
    """TrackEvent `type` and `track_uuid`: the constant head of every event on a track."""
    return varint_field(EVENT_TYPE, kind) + varint_field(EVENT_TRACK_UUID, uuid)


# Tag + length prefixes of length-delimited fields, indexed by length (short ones only).
def len_prefixes(field: int, limit: int = _SMALL_LIMIT) -> list[bytes]:
    tag = key(field, LEN)
    return [tag + _SMALL[n] for n in range(limit)]


FRAME_PREFIX = len_prefixes(TRACE_PACKET)
TRACK_EVENT_PREFIX = len_prefixes(PACKET_TRACK_EVENT)
ANNOTATION_PREFIX = len_prefixes(EVENT_DEBUG_ANNOTATIONS, 128)
# `timestamp` field (tag + varint) for small values: incremental timestamps are deltas.
TIMESTAMP_SMALL = [key(PACKET_TIMESTAMP, VARINT) + v for v in _SMALL]

# Flow ids are fixed64: the tag (two bytes, little-endian as a uint16) and the id in one pack.
FLOW = struct.Struct("<HQ")
FLOW_TAG = int.from_bytes(key(EVENT_FLOW_IDS, FIXED64), "little")
TERMINATING_FLOW_TAG = int.from_bytes(key(EVENT_TERMINATING_FLOW_IDS, FIXED64), "little")
_DOUBLE = struct.Struct("<d")
ANNOTATION_INT_TAG = key(ANNOTATION_INT, VARINT)
ANNOTATION_STRING_IID_TAG = key(ANNOTATION_STRING_IID, VARINT)
_ANNOTATION_DOUBLE_TAG = key(ANNOTATION_DOUBLE, FIXED64)
_ANNOTATION_TRUE = key(ANNOTATION_BOOL, VARINT) + b"\x01"
_ANNOTATION_FALSE = key(ANNOTATION_BOOL, VARINT) + b"\x00"


def flow_ids(ids: tuple[int, ...]) -> bytes:
    return b"".join([FLOW.pack(FLOW_TAG, i) for i in ids])


def terminating_flow_ids(ids: tuple[int, ...]) -> bytes:
    return b"".join([FLOW.pack(TERMINATING_FLOW_TAG, i) for i in ids])


def annotation_name(name_iid: int) -> bytes:
    """The `name_iid` field of a DebugAnnotation: the constant head of every annotation
    with this name."""
    return varint_field(ANNOTATION_NAME_IID, name_iid)


def annotation(body: bytes) -> bytes:
    """A DebugAnnotation (field 4 of TrackEvent) around its encoded fields."""
    return len_field(EVENT_DEBUG_ANNOTATIONS, body)


def int_annotation(name: bytes, value: int) -> bytes:
    """`name` from annotation_name(); value in int64 range."""
    v = _SMALL[value] if 0 <= value < _SMALL_LIMIT else varint(value)
    return ANNOTATION_PREFIX[len(name) + 1 + len(v)] + name + ANNOTATION_INT_TAG + v


def string_iid_annotation(name: bytes, value_iid: int) -> bytes:
    v = varint(value_iid)
    return ANNOTATION_PREFIX[len(name) + 2 + len(v)] + name + ANNOTATION_STRING_IID_TAG + v


def double_annotation(name: bytes, value: float) -> bytes:
    return ANNOTATION_PREFIX[len(name) + 9] + name + _ANNOTATION_DOUBLE_TAG + _DOUBLE.pack(value)


def bool_annotation(name: bytes, value: bool) -> bytes:
    return (
        ANNOTATION_PREFIX[len(name) + 2] + name + (_ANNOTATION_TRUE if value else _ANNOTATION_FALSE)
    )
