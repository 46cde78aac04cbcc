"""Addresses past 2 GiB of the engine's heap: wasm32 passes them as i32, which arrive in
Python negative.  A reply the engine hands over from there must be read from there (a
5M-slice report's answers were read from elsewhere and came back as garbage batches)."""

from __future__ import annotations

from exporters.perfetto.engine.wasm_engine import WasmTransport

HIGH = 2**31 + 5 * 65536 + 123  # an address past 2 GiB


def _as_i32(address: int) -> int:
    return address - 2**32 if address >= 2**31 else address


def test_reply_and_strings_past_two_gib_are_read_from_there() -> None:
    t = WasmTransport()
    memory, store = t._memory, t._store
    assert memory is not None
    pages = (HIGH + 65536 - memory.data_len(store)) // 65536 + 1
    memory.grow(store, pages)  # virtual: only the pages written below are touched
    memory.write(store, b"answer\0", HIGH)
    t._on_reply(_as_i32(HIGH), 6)
    assert t.read(6) == b"answer"
    assert t._cstr(_as_i32(HIGH)) == "answer"
    t._put(_as_i32(HIGH + 8), "<I", 0xDEADBEEF)
    assert t._u32(_as_i32(HIGH + 8)) == 0xDEADBEEF
    assert memory.read(store, HIGH + 8, HIGH + 12) == (0xDEADBEEF).to_bytes(4, "little")
    t.close()
