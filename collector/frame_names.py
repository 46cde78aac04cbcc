"""Readable frame names: C++ functions without parameter lists and template arguments.

`at::native::copy_impl(at::Tensor&, at::Tensor const&, bool)` reads `at::native::copy_impl`;
`void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<...>(long, ...)`
reads `c10::function_ref::callback_fn`.  Python frames (`name (file.py:12)`), `[GPU_Kernel]`
names and unresolved addresses are left as they are.  The trace keeps the full signatures;
`folded`, `report` and `flamegraph` show these by default (`--full-names` for the rest).
"""

from __future__ import annotations

import re
from functools import lru_cache

from collector.frames import is_python_frame

_RETURN_TYPE = re.compile(r"^(?:[\w:]+[\s*&]+)+(?=[\w~:]*(?:operator|\w)[^\s]*$)")
_KEEP_PREFIXES = ("[", "0x")


def _strip_balanced(text: str, open_ch: str, close_ch: str) -> str:
    """Text with every outermost open_ch...close_ch group removed (nested groups included)."""
    out = []
    depth = 0
    for ch in text:
        if ch == open_ch:
            depth += 1
        elif ch == close_ch and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


_DEVICE_STUB = "__device_stub__"


@lru_cache(maxsize=65536)
def short_name(name: str) -> str:
    if not name or name.startswith(_KEEP_PREFIXES) or is_python_frame(name):
        return name
    if name.startswith(_DEVICE_STUB + "Z"):
        # nvcc's host stub of a kernel carries the kernel's mangled name in its own.
        mangled = "_" + name[len(_DEVICE_STUB) :].split("(", 1)[0]
        import cxxfilt  # here: `convert` (no native frames) never loads its libstdc++ demangler

        try:
            return f"{_DEVICE_STUB} {short_name(cxxfilt.demangle(mangled))}"
        except cxxfilt.InvalidName:
            return name
    if "(" not in name and "<" not in name:
        return name
    text = name.replace("(anonymous namespace)", "{anon}")
    # operator() / operator<< keep their own brackets.
    text = text.replace("operator()", "operator\x00").replace("operator<<", "operator\x01")
    text = text.replace("operator<", "operator\x02").replace("operator>", "operator\x03")
    text = _strip_balanced(text, "<", ">")
    # The parameter list is the last top-level group; lambdas' groups sit inside {...}.
    text = _strip_balanced(text, "(", ")")
    text = re.sub(r"\s+(const|volatile|&&|&|noexcept)\b", "", text).strip()
    text = text.split(" [clone")[0]
    if " " in text:  # a return type in front ("void c10::...")
        text = text.rsplit(" ", 1)[-1]
    text = text.replace("operator\x00", "operator()").replace("operator\x01", "operator<<")
    text = text.replace("operator\x02", "operator<").replace("operator\x03", "operator>")
    return text.replace("{anon}", "(anonymous namespace)") or name


def shorten_stack(stack: str) -> str:
    """A folded stack (frames joined by ';') with every frame's name shortened."""
    return ";".join(short_name(frame) for frame in stack.split(";"))
