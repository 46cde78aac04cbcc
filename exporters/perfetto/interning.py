"""Interning: the tables that give names, args, frames and stacks small ids (iids) on a
sequence, and the encoded bytes of the fields that refer to them.

A sequence (sequences.Sequence) is an InternedFields: a hot packet is then mostly cached
bytes (a name's `name_iid` field, a whole annotation for an arg value seen before).  New
entries are collected until the sequence writes them in an `interned_data` field or packet
ahead of their first user (take_fresh()).
"""

from __future__ import annotations

from collections.abc import Iterable
from math import copysign
from typing import Any, cast

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from collector import model
from exporters.perfetto import wire

# Arg value types whose encodings are cached by (key, value) and may be part of a cached
# BEGIN: 1, 1.0 and True are equal as dict keys, so floats and bools are kept apart.
CACHED_TYPES = frozenset((int, str))
# The float cache's key for -0.0, which equals 0.0 as a dict key but is encoded otherwise.
_NEGATIVE_ZERO = "-0.0"
# Distinct values of one arg key that are cached before the key counts as varying (64:
# 0.1-1.6% smaller converted traces than 256, 16 or 32; docs/benchmarks.md).
_DISTINCT_VALUES = 64
# The same for float args, which are never part of a cached BEGIN: bandwidths take more
# than 64 values that still repeat (256: multi_stream 136 B smaller than with 64).
_DISTINCT_FLOATS = 256
# Encoded text annotations of varying keys kept by value, at most (then started again).
_VARYING_TEXTS = 1 << 16
_int_annotation = wire.int_annotation


class Interner:
    """One interning table: value -> iid, new entries reported once."""

    __slots__ = ("fresh", "ids")

    def __init__(self) -> None:
        self.ids: dict[object, int] = {}
        self.fresh: list[tuple[int, object]] = []

    def get(self, value: object) -> int:
        iid = self.ids.get(value)
        if iid is None:
            iid = len(self.ids) + 1
            self.ids[value] = iid
            self.fresh.append((iid, value))
        return iid


class InternedFields:
    """A sequence's interning tables and the encoded fields of its interned entries."""

    def __init__(self) -> None:
        self.event_names = Interner()
        self.categories = Interner()
        self.annotation_names = Interner()
        self.annotation_strings = Interner()  # string arg values repeat a lot (shapes, kinds)
        self.strings = Interner()  # function names and mapping paths share one table
        self.mappings = Interner()
        self.frames = Interner()
        self.callstacks = Interner()
        # True while an interner holds entries not yet written (see interned_field).
        self.dirty = False
        # Encoded fields by value: `name_iid`, `category_iids`, annotation `name_iid`, and
        # whole annotations for argument values that repeat (see annotation()).
        self.name_fields: dict[str, bytes] = {}
        self.category_fields: dict[str, bytes] = {}
        self.annotation_name_fields: dict[str, bytes] = {}
        self.annotation_cache: dict[tuple[str, model.ArgValue], bytes] = {}
        # Float args by (key, value), apart from annotation_cache: only floats are ever
        # looked up here, so 1.0 cannot find the encoding of 1 or True (-0.0 has a key of
        # its own, see args_fields).
        self._float_annotations: dict[tuple[str, object], bytes] = {}
        self._distinct_values: dict[str, int] = {}
        # Arg keys seen with many distinct values (ids): never cached, never part of a
        # cached BEGIN head, and written last.
        self.varying_keys: set[str] = set()
        self._varying_texts: dict[tuple[str, str], bytes] = {}

    def name_field(self, name: str) -> bytes:
        field = self.name_fields.get(name)
        if field is None:
            field = wire.varint_field(wire.EVENT_NAME_IID, self.event_names.get(name))
            self.name_fields[name] = field
            self.dirty = True
        return field

    def category_field(self, category: str) -> bytes:
        """`category_iids` (nothing for no category: the hot loop then finds b"", which
        is falsy, and comes here; cheap, and only for uncategorized slices)."""
        if not category:
            return b""
        field = self.category_fields.get(category)
        if field is None:
            iid = self.categories.get(category)
            field = wire.varint_field(wire.EVENT_CATEGORY_IIDS, iid)
            self.category_fields[category] = field
            self.dirty = True
        return field

    def annotation_name(self, key: str) -> bytes:
        field = self.annotation_name_fields.get(key)
        if field is None:
            field = wire.annotation_name(self.annotation_names.get(key))
            self.annotation_name_fields[key] = field
            self.dirty = True
        return field

    def annotation(self, key: str, value: model.ArgValue) -> bytes:
        """One debug annotation (arg `debug.<key>` in SQL) with interned name and text.

        Annotations whose value repeats (grid and block sizes, registers, shapes) are
        cached whole, keyed by (key, value) and checked for the value's exact type
        (1, 1.0 and True are equal dict keys); a key with many distinct values (ids,
        timestamps) stops being cached after a while.
        """
        name = self.annotation_name(key)
        kind = type(value)
        if isinstance(value, int) and kind is not bool:  # one test, which narrows for mypy(c)
            if wire.INT64_MIN <= value <= wire.INT64_MAX:
                encoded = _int_annotation(name, int(value))
            else:
                encoded = wire.string_iid_annotation(name, self._string_iid(str(value)))
        elif isinstance(value, bool):
            encoded = wire.bool_annotation(name, value)
        elif isinstance(value, float):
            encoded = wire.double_annotation(name, value)
        else:
            encoded = wire.string_iid_annotation(name, self._string_iid(value))
        if kind is int or kind is str:
            seen = self._distinct_values.get(key, 0)
            if seen < _DISTINCT_VALUES:
                self._distinct_values[key] = seen + 1
                self.annotation_cache[(key, value)] = encoded
            else:
                self.varying_keys.add(key)
        return encoded

    def varying_annotation(self, key: str, value: model.ArgValue) -> bytes:
        """annotation() of a key in `varying_keys`, the same bytes: ints encoded at once,
        texts by value from a bounded cache (Kineto's shapes and types as JSON text have
        more values than are counted as repeating, yet each comes back many times), and
        without annotation()'s counting, which only finds the key varying again."""
        if type(value) is int:  # exactly int: a bool is encoded as one
            name = self.annotation_name_fields.get(key)
            if name is not None and 0 <= value <= wire.INT64_MAX:
                return _int_annotation(name, value)
        elif type(value) is str:
            texts = self._varying_texts
            encoded = texts.get((key, value))
            if encoded is None:
                encoded = self.annotation(key, value)
                if len(texts) >= _VARYING_TEXTS:
                    texts.clear()
                texts[(key, value)] = encoded
            return encoded
        return self.annotation(key, value)

    def args_fields(
        self, items: Iterable[tuple[str, model.ArgValue]], parts: list[bytes]
    ) -> list[bytes] | None:
        """Encode args `items`: annotations whose value may well repeat are appended to
        `parts`, the others returned (they go last in the event); None when every value had
        been seen before (the caller may then cache the whole event head)."""
        cache = self.annotation_cache
        varying = []
        all_known = True
        for item in items:
            encoded = cache.get(item)
            if encoded is not None and type(item[1]) in CACHED_TYPES:
                parts.append(encoded)
                continue
            all_known = False
            if type(item[1]) is float:
                # Never part of a cached BEGIN (see CACHED_TYPES), but a float that
                # repeats (blocks per SM, occupancy) belongs with the constant fields:
                # after the ids it would split their literals into two runs.
                float_key = item
                if not item[1] and copysign(1.0, item[1]) < 0:
                    float_key = (item[0], _NEGATIVE_ZERO)  # -0.0 == 0.0, not the same bits
                encoded = self._float_annotations.get(float_key)
                if encoded is None:
                    encoded = self.annotation(*item)
                    if self._float_repeats(item):
                        self._float_annotations[float_key] = encoded
                    else:
                        varying.append(encoded)
                        continue
                parts.append(encoded)
                continue
            encoded = self.annotation(*item)
            if item in cache and type(item[1]) in CACHED_TYPES:
                parts.append(encoded)  # cacheable: a value that may well repeat
            else:
                varying.append(encoded)
        return None if all_known else varying

    def _float_repeats(self, item: tuple[str, model.ArgValue]) -> bool:
        """Whether float arg values of this key are still cached (their first
        _DISTINCT_FLOATS values are; the later ones go with the varying values)."""
        key = item[0]
        seen = self._distinct_values.get(key, 0)
        if seen < _DISTINCT_FLOATS:
            self._distinct_values[key] = seen + 1
            return True
        return False

    def annotations(self, args: Iterable[tuple[str, model.ArgValue]]) -> list[bytes]:
        """Every annotation of `args` (for instants: no ordering, no event cache)."""
        cache = self.annotation_cache
        out = []
        for item in args:
            encoded = cache.get(item)
            if encoded is None or type(item[1]) not in CACHED_TYPES:
                encoded = self.annotation(*item)
            out.append(encoded)
        return out

    def _string_iid(self, value: object) -> int:
        known = self.annotation_strings.ids.get(value)
        if known is not None:
            return known
        self.dirty = True
        return self.annotation_strings.get(value)

    def interned_field(self) -> bytes:
        """The `interned_data` field with every entry interned since the last call (the
        packet that first uses an entry carries it), or b""."""
        data = pb.InternedData()
        self.take_fresh(data)
        payload = data.SerializeToString()
        return wire.len_field(wire.PACKET_INTERNED_DATA, payload) if payload else b""

    def take_fresh(self, data: pb.InternedData) -> int:
        """Move the entries interned since the last call into `data`; returns about how
        many bytes they add to it."""
        self.dirty = False
        size = 0
        for iid, name in self.event_names.fresh:
            data.event_names.add(iid=iid, name=str(name))
            size += len(str(name))
        for iid, name in self.categories.fresh:
            data.event_categories.add(iid=iid, name=str(name))
        for iid, name in self.annotation_names.fresh:
            data.debug_annotation_names.add(iid=iid, name=str(name))
            size += len(str(name))
        for iid, value in self.annotation_strings.fresh:
            encoded = str(value).encode("utf-8", "replace")
            data.debug_annotation_string_values.add(iid=iid, str=encoded)
            size += len(encoded)
        for iid, text in self.strings.fresh:
            kind, value = cast(tuple[str, str], text)  # what callstack_iid interns
            target = data.function_names if kind == "f" else data.mapping_paths
            target.add(iid=iid, str=value.encode("utf-8", "replace"))
        for iid, key in self.mappings.fresh:
            path_iid, build_id = cast(tuple[int, str | None], key)
            m = data.mappings.add(iid=iid)
            m.path_string_ids.append(path_iid)
            if build_id:
                data.build_ids.add(iid=iid, str=build_id.encode())
                m.build_id = iid
        for iid, key in self.frames.fresh:
            # rel_pc as the source gave it (the protobuf field takes any integer type).
            fn_iid, mapping_iid, rel_pc = cast(tuple[int, int, Any], key)
            data.frames.add(iid=iid, function_name_id=fn_iid, mapping_id=mapping_iid, rel_pc=rel_pc)
        for iid, frame_ids in self.callstacks.fresh:
            data.callstacks.add(iid=iid, frame_ids=frame_ids)
        for table in (
            self.event_names,
            self.categories,
            self.annotation_names,
            self.annotation_strings,
            self.strings,
            self.mappings,
            self.frames,
            self.callstacks,
        ):
            size += 8 * len(table.fresh)
            table.fresh.clear()
        return size

    def callstack_iid(self, stack: model.Stack) -> int:
        known = self.callstacks.ids.get(stack)
        if known is not None:
            return known
        self.dirty = True
        frame_ids = []
        for fr in stack.frames:
            fn = self.strings.get(("f", fr.function))
            mapping = self.mappings.get(
                (self.strings.get(("m", fr.module or "[unknown]")), fr.build_id)
            )
            frame_ids.append(self.frames.get((fn, mapping, fr.rel_pc)))
        iid = len(self.callstacks.ids) + 1
        self.callstacks.ids[stack] = iid
        self.callstacks.fresh.append((iid, frame_ids))
        return iid
