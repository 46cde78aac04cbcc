"""Launch stacks from the CUPTI stream → model.Stack: native return addresses symbolized
through the process's module map (ELF symbols via collector.symbolize, demangled), and the
Python frames spliced in where the interpreter ran them.

`symbolize_native(modules, pcs)` is the one function that names injection-library addresses;
it reuses collector.symbolize's ELF symbol tables (the eBPF path uses the same ones).
"""

from __future__ import annotations

import bisect
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from collector import frames as frames_module
from collector.model import Frame, Stack, is_python_frame
from collector.sources.cupti_stream import Stream
from collector.symbolize import Symbolizer

PYTHON_EVAL_FUNCTIONS = ("_PyEval_EvalFrameDefault",)
_UNKNOWN = "[unknown]"


@dataclass(frozen=True, slots=True)
class Module:
    """One loaded ELF object of the traced process (MODULE chunk)."""

    lo: int
    hi: int
    load_bias: int
    path: str
    build_id: str


class ModuleMap:
    """Address → module, for one process; later MODULE chunks add objects loaded later."""

    def __init__(self, modules: Sequence[Module]) -> None:
        unique = {(m.lo, m.hi, m.path): m for m in modules}
        self._modules = sorted(unique.values(), key=lambda m: m.lo)
        self._starts = [m.lo for m in self._modules]

    def find(self, pc: int) -> Module | None:
        i = bisect.bisect_right(self._starts, pc) - 1
        if i >= 0 and pc < self._modules[i].hi:
            return self._modules[i]
        return None


def symbolize_native(
    symbolizer: Symbolizer, modules: ModuleMap, pcs: Sequence[int], first_exact: bool = False
) -> list[Frame]:
    """Frames for return addresses, innermost first; each is looked up at pc - 1 (the call).
    first_exact: pcs[0] is an interrupted instruction (a CPU sample), looked up as it is."""
    frames = []
    for i, pc in enumerate(pcs):
        if i == 0 and first_exact:
            pc += 1  # so that pc - 1 below is the instruction itself
        module = modules.find(pc - 1)
        if module is None:
            frames.append(Frame(f"0x{pc:x}", _UNKNOWN, pc))
            continue
        vaddr = pc - module.load_bias
        elf = symbolizer.elf(module.path) if module.path.startswith("/") else None
        name = elf.function_at(vaddr - 1) if elf is not None else None
        if name is None:
            name = f"{os.path.basename(module.path)}+0x{vaddr:x}"
        frames.append(Frame(name, module.path, vaddr, module.build_id))
    return frames


@dataclass(frozen=True, slots=True)
class PythonFrame:
    filename: str
    function: str
    line: int

    def frame(self) -> Frame:
        return Frame(
            f"{self.function} ({os.path.basename(self.filename)}:{self.line})",
            self.filename,
            self.line,
        )


def merge_python(native: list[Frame], python: Sequence[PythonFrame | None]) -> list[Frame]:
    """Splice Python frames (innermost first; None separates interpreter invocations) into
    the native frames (innermost first) in place of the interpreter's eval-loop frames, the
    way py-spy's native mode does.  Extra Python segments go on the outer end."""
    segments: list[list[Frame]] = [[]]
    for pf in python:
        if pf is None:
            segments.append([])
        else:
            segments[-1].append(pf.frame())
    segments = [s for s in segments if s]
    if not segments:
        return native
    merged: list[Frame] = []
    seg = 0
    for fr in native:
        if seg < len(segments) and fr.function in PYTHON_EVAL_FUNCTIONS:
            merged.extend(segments[seg])
            seg += 1
        else:
            merged.append(fr)
    for rest in segments[seg:]:
        merged.extend(rest)
    return merged


def drop_interpreter_addresses(frames: list[Frame]) -> tuple[list[Frame], int]:
    """In a stack that has Python frames, the interpreter's unnamed frames
    (`python3.12+0x6bcf22`) only repeat what the Python frames say, the way py-spy's native
    mode leaves them out; they go, and the caller counts them.  Named interpreter frames
    (`PyObject_Vectorcall`) and every frame of other objects stay."""
    if not any(is_python_frame(f) for f in frames):
        return frames, 0
    kept = [
        f
        for f in frames
        # The interpreter's static functions have no symbols in distribution builds
        # (Debian's and Ubuntu's python3.x keep only dynamic symbols).
        if not (
            frames_module.is_unnamed_address(f.function, f.module)
            and frames_module.is_interpreter_module(f.module)
        )
    ]
    return kept, len(frames) - len(kept)


def _lib(frame: Frame) -> str:
    return os.path.basename(frame.module)


def drop_tracer_frames(frames: list[Frame]) -> tuple[list[Frame], int]:
    """A launch stack is taken inside CUPTI's callback: its innermost frames are libcupti's
    and the driver's dispatch to it, not the program's.  They go, so that the API call is the
    innermost frame: every libcupti frame at the inner end, then the driver's unnamed frames
    under it.  A named driver frame (`cuLaunchKernel`, exported) is the driver API the
    program called, and stays."""
    i = 0
    while i < len(frames) and _lib(frames[i]).startswith("libcupti"):
        i += 1
    while (
        i < len(frames)
        and _lib(frames[i]).startswith("libcuda.so")
        and frames[i].function.startswith(_lib(frames[i]) + "+0x")
    ):
        i += 1
    return frames[i:], i


def launch_stack(frames_innermost_first: list[Frame]) -> Stack:
    return Stack(tuple(reversed(frames_innermost_first)))


def stream_stacks(
    stream: Stream,
    strings: dict[int, str],
    symbolizer: Symbolizer,
    first_exact: bool = False,
    counts: Counter[str] | None = None,
    launch: bool = False,
) -> dict[int, Stack]:
    """Every STACK row of a stream (launch stacks, or CPU samples' stacks) by id, symbolized
    through the stream's own module map, Python frames spliced in; `counts` gets
    `interpreter_frames_dropped` (per distinct stack).  launch: the stacks were taken in
    CUPTI's callback, whose own frames are dropped (`tracer_frames_dropped`)."""
    t = stream.table("STACK")
    if not t.rows:
        return {}
    mods = stream.table("MODULE")
    modules = ModuleMap(
        [
            Module(*(mods[c][i] for c in ("lo", "hi", "load_bias", "path", "build_id")))
            for i in range(mods.rows)
        ]
    )
    pyt = stream.table("PYFRAME")
    pyframes: dict[int, PythonFrame] = {}
    for i in range(pyt.rows):
        pyframes[pyt["pyframe_id"][i]] = PythonFrame(
            strings.get(pyt["filename_id"][i], "?"),
            strings.get(pyt["function_id"][i], "?"),
            pyt["line"][i],
        )
    out: dict[int, Stack] = {}
    for i in range(t.rows):
        native = symbolize_native(symbolizer, modules, t["native_pcs"][i], first_exact)
        python = [pyframes.get(fid) if fid else None for fid in t["python_frames"][i]]
        frames, dropped = drop_interpreter_addresses(merge_python(native, python))
        tracer = 0
        if launch:
            frames, tracer = drop_tracer_frames(frames)
        if counts is not None:
            counts["interpreter_frames_dropped"] += dropped
            counts["tracer_frames_dropped"] += tracer
        out[t["stack_id"][i]] = launch_stack(frames)
    return out
