"""What a parsed JSON text is, as a type: the values orjson and ijson (with use_float) give,
nested.  A Kineto trace is input, so nothing in it is trusted to have the type its key
suggests: readers narrow a value (type(), isinstance, a TypeGuard) before they use it."""

from __future__ import annotations

from typing import TypeAlias

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
# A JSON object: a Kineto event, its args.
JsonObject: TypeAlias = "dict[str, JsonValue]"
