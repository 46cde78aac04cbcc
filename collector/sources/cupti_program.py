"""The program's own CUPTI client (torch.profiler's Kineto, a tool of its own) as the injection
library saw it while it held CUPTI: the PROGRAM_CUPTI rows of a stream (calls per entry
point, calling module and outcome) and the forwarding counters become one line per process
for the summary and the metadata, and the run's counts (cupti_inject/src/program_profiler.c).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from collector.sources.cupti_stream import Stream

# Modules whose CUPTI calls are a known profiler's (by file name prefix): Kineto is linked
# into libtorch_cpu.so in PyTorch 2.11's CUDA wheels (the calls came from there on the H100),
# into libtorch_cuda.so in older ones.
KNOWN_CALLERS = (
    ("libtorch_cpu", "torch.profiler/Kineto"),
    ("libtorch_cuda", "torch.profiler/Kineto"),
    ("libkineto", "Kineto"),
    ("libtensorflow", "TensorFlow profiler"),
    ("libjax", "JAX profiler"),
    ("libxla", "XLA profiler"),
)
SERVED = "served"
REFUSED = "refused"


def caller_label(module: str) -> str:
    """The calling module, with the profiler it is known to hold."""
    for prefix, profiler in KNOWN_CALLERS:
        if module.startswith(prefix):
            return f"{module} ({profiler})"
    return module


def program_client_line(
    process: str, stream: Stream, counters: Mapping[str, int], counts: Counter[str]
) -> str | None:
    """'pid N (name): <caller>: <calls>; <what it got>' for a process whose program used
    CUPTI while we held it (None: it did not); adds to the run's `counts`."""
    rows = stream.table("PROGRAM_CUPTI")
    if not rows.rows:
        return None
    by_caller: dict[str, list[str]] = {}
    outcomes: Counter[str] = Counter()
    for api, caller, calls, outcome in zip(
        rows["api"], rows["caller"], rows["calls"], rows["outcome"], strict=True
    ):
        by_caller.setdefault(caller_label(caller), []).append(f"{api} x{calls} {outcome}")
        outcomes[outcome] += calls
        counts["program_cupti_calls"] += calls
    counts["program_cupti_processes"] += 1
    counts["program_cupti_refused"] += outcomes[REFUSED]
    callers = "; ".join(f"{who}: {', '.join(calls)}" for who, calls in by_caller.items())
    return f"{process}: {callers}; {_what_it_got(outcomes, counters)}"


def _what_it_got(outcomes: Counter[str], counters: Mapping[str, int]) -> str:
    forwarded = counters.get("program_records_forwarded", 0)
    callbacks = counters.get("program_callbacks_forwarded", 0)
    if outcomes[REFUSED] and not outcomes[SERVED]:
        return (
            "refused (CUPTI serves one subscriber, and xpu-perf held it): the program's "
            "profiler got no GPU activity"
        )
    got = f"served from xpu-perf's session: {forwarded} records, {callbacks} callbacks forwarded"
    lost = counters.get("program_records_not_forwarded", 0)
    if lost:
        got += f", {lost} records not (its buffers were too few or too small)"
    if outcomes[REFUSED]:
        got += f"; {outcomes[REFUSED]} calls refused"
    return got
