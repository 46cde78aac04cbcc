"""The program's own profiler on `record`'s side (issue 25): what record does when the target
uses CUPTI itself (torch.profiler's Kineto, Lightning's or HF's profiler callbacks) while the
injection library holds it, and when another tool (nsys, compute-sanitizer) already set
CUDA_INJECTION64_PATH for record.

CUPTI serves one subscriber per process.  `serve` (the default): the program's CUPTI calls
are answered from our session, so its own trace gets its GPU activity as it would without us
(cupti_inject/src/program_profiler.c).  `refuse`: it is answered as CUPTI would answer a
second subscriber, and its profile has no GPU activity (what happened silently before).
Either way the summary and the metadata say, per process, who called and what it got."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MODES = ("serve", "refuse")
INJECTION_VARIABLE = "CUDA_INJECTION64_PATH"
# Injection libraries of NVIDIA's tools, by a piece of their file name or directory.
KNOWN_INJECTIONS = (
    ("nsys", "Nsight Systems (nsys)"),
    ("ToolsInjection", "Nsight Systems (nsys)"),
    ("sanitizer", "compute-sanitizer"),
    ("nsight-compute", "Nsight Compute (ncu)"),
    ("InterceptorInjection", "Nsight Compute (ncu)"),
)


def add_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--program-profiler",
        choices=MODES,
        default="serve",
        help="when the program runs its own CUPTI profiler (torch.profiler): serve it from "
        "xpu-perf's CUPTI session, so its trace keeps its GPU activity (default), or refuse "
        "it as CUPTI refuses a second subscriber; the summary says which happened",
    )


@dataclass(frozen=True)
class ProgramProfilerPlan:
    """`mode`: serve or refuse; `replaced_injection`: the CUDA_INJECTION64_PATH another tool
    had set in record's environment (ours replaces it in the target's)."""

    mode: str = "serve"
    replaced_injection: str | None = None

    @property
    def library_env(self) -> dict[str, str]:
        return {"XPU_PERF_PROGRAM_PROFILER": self.mode}


def program_profiler_plan(
    args: argparse.Namespace, environ: Mapping[str, str], ours: Path | None = None
) -> ProgramProfilerPlan:
    """The mode asked for, and another tool's injection library already in the environment
    (not ours: a nested record passes its own on)."""
    other = environ.get(INJECTION_VARIABLE) or None
    if other is not None and ours is not None and Path(other).name == ours.name:
        other = None
    return ProgramProfilerPlan(getattr(args, "program_profiler", "serve"), other)


def injection_tool(path: str) -> str:
    """Which tool an injection library is, from its path."""
    for piece, tool in KNOWN_INJECTIONS:
        if piece.lower() in path.lower():
            return tool
    return "another tool"


def summary_lines(
    plan: ProgramProfilerPlan | None, cupti: Mapping[str, int], profilers: Sequence[str]
) -> list[str]:
    """What the summary says about the program's own profiler and other tools' injection
    (`plan` None: a recording written from its kept streams, whose mode is not known here;
    each line says what happened)."""
    lines = []
    if plan is not None and plan.replaced_injection:
        lines.append(
            f"{INJECTION_VARIABLE} was set to {plan.replaced_injection} "
            f"({injection_tool(plan.replaced_injection)}): xpu-perf's injection library "
            "replaced it in the target, so that tool recorded no CUDA activity of it"
        )
    if cupti.get("cupti_subscribe_refused", 0):
        lines.append(
            f"{cupti['cupti_subscribe_refused']} processes had a CUPTI subscriber before "
            "xpu-perf's (the program's own profiler, started before CUDA): their CUDA API "
            "calls and launch stacks are missing"
        )
    if profilers:
        mode = ""
        if plan is not None:
            served = "served" if plan.mode == "serve" else "refused"
            mode = f"; --program-profiler {plan.mode}: {served}"
        lines.append(
            f"the program's own CUPTI profiler ({cupti.get('program_cupti_calls', 0)} CUPTI "
            f"calls in {len(profilers)} processes{mode}):"
        )
        lines += [f"  {line}" for line in profilers]
    outside = cupti.get("gpu_ops_outside_window", 0)
    if outside:
        lines.append(
            f"{outside} GPU ops outside the capture windows (recorded while the program's "
            "profiler kept their kinds on) were left out"
        )
    return lines


def notes(plan: ProgramProfilerPlan | None, profilers: Sequence[str]) -> dict[str, str]:
    """The trace's text metadata (SQL: debug.cupti_<key>; `plan` None: from kept streams)."""
    out = {"program_profiler": plan.mode} if plan is not None else {}
    if profilers:
        out["program_profilers"] = "; ".join(profilers)
    if plan is not None and plan.replaced_injection:
        out["replaced_injection"] = plan.replaced_injection
        out["replaced_injection_tool"] = injection_tool(plan.replaced_injection)
    return out
