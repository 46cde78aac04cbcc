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


# A bounded memo of a pure function of the name (no state kept per trace).
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


# Template arguments that say nothing about what a kernel computes: element types, counts,
# vector widths and the argument arrays of PyTorch's elementwise kernels.
_PLAIN_TYPES = frozenset(
    [
        "float",
        "double",
        "int",
        "unsigned",
        "signed",
        "long",
        "short",
        "char",
        "bool",
        "void",
        "half",
        "__half",
        "__nv_bfloat16",
        "Half",
        "BFloat16",
        "Float8_e4m3fn",
        "Float8_e5m2",
        "complex",
        "array",
        "Array",
        "int8_t",
        "int16_t",
        "int32_t",
        "int64_t",
        "uint8_t",
        "uint16_t",
        "uint32_t",
        "uint64_t",
        "size_t",
        "nullptr_t",
    ]
)
_LITERAL = re.compile(r"^-?(?:\d[\w.]*|true|false|\(\w[\w ]*\)-?\d+\w*)$")


def _split_top(text: str, sep: str) -> list[str]:
    """`text` cut at every `sep` outside <...>, (...) and {...}."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        ch = text[i]
        if depth == 0 and text.startswith(sep, i):
            parts.append(text[start:i])
            start = i + len(sep)
            i = start
            continue
        if ch in "<({":
            depth += 1
        elif ch in ">)}" and depth:
            depth -= 1
        i += 1
    parts.append(text[start:])
    return parts


def _template_args(component: str) -> tuple[str, list[str]]:
    """`name<a, b>(params) const` -> ('name', ['a', 'b'])."""
    head = _split_top(component, "(")[0]  # no parameter list (splits at depth 0 only)
    cut = head.find("<")
    if cut < 0 or not head.rstrip().endswith(">"):
        return head.strip(), []
    inner = head[cut + 1 : head.rstrip().rfind(">")]
    return head[:cut].strip(), [a.strip() for a in _split_top(inner, ",") if a.strip()]


def _core(arg: str, keep_plain: bool) -> str | None:
    """What a template argument names, shortly: the innermost named entity without its
    namespaces (a lambda reads as the function it is in), with its own telling arguments;
    None for literals and plain types unless keep_plain."""
    arg = arg.strip()
    if _LITERAL.match(arg):
        return arg if keep_plain else None
    components = [
        c.strip()
        for c in _split_top(arg.replace("(anonymous namespace)", "{anon}"), "::")
        if c.strip() and not c.strip().startswith(("{", "operator"))
    ]
    if not components:
        return None
    name, args = _template_args(components[-1])
    name = name.replace("const", "").replace("*", "").replace("&", "").strip()
    name = name.rsplit(" ", 1)[-1] if name else name
    if not name:
        return None
    inner = [c for c in (_core(a, keep_plain) for a in args) if c]
    if not keep_plain and name in _PLAIN_TYPES and not inner:
        return None
    return f"{name}<{', '.join(inner)}>" if inner else name


def kernel_label(name: str, keep_plain: bool = False) -> str:
    """A GPU kernel's name that tells kernels apart: `short_name` plus the template
    arguments that name what it computes (its functor, the function its lambda is in),
    e.g. `at::native::vectorized_elementwise_kernel<GeluCUDAKernelImpl>` against
    `...<BinaryFunctor<MulFunctor>>`; keep_plain keeps literals and element types too."""
    # The anonymous namespace tells nothing apart and takes 23 characters of a cell.
    base = short_name(name).replace("(anonymous namespace)::", "")
    if "<" not in name or name.startswith(_KEEP_PREFIXES) or is_python_frame(name):
        return base
    text = name.replace("(anonymous namespace)", "{anon}")
    head = _split_top(text, "(")[0]  # the declaration up to its parameter list
    head = _split_top(head.strip(), " ")[-1]  # without a return type in front
    last = _split_top(head, "::")[-1]
    _, args = _template_args(last.replace("{anon}", "(anonymous namespace)"))
    shown = [c for c in (_core(a, keep_plain) for a in args) if c]
    return f"{base}<{', '.join(shown)}>" if shown else base


def kernel_labels(names: list[str]) -> dict[str, str]:
    """`kernel_label` of each name; names that would read alike keep their literal and
    type arguments too (two cuBLAS reductions that differ in a flag)."""
    labels = {n: kernel_label(n) for n in names}
    seen: dict[str, int] = {}
    for label in labels.values():
        seen[label] = seen.get(label, 0) + 1
    for n, label in labels.items():
        if seen[label] > 1:
            labels[n] = kernel_label(n, keep_plain=True)
    return labels
