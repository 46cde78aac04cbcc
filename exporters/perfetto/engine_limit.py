"""How big a trace the embedded engine opens, and what to say above it.

The embedded trace_processor is a wasm32 module: its heap stops at 4 GiB whatever the
machine has.  Measured on this project's 2-core, 24 GB VM (docs/benchmarks.md, "Big
traces"; bench/scale.py, converted Kineto traces): a trace of LOADS_UP_TO slices loads
and answers `query`, but the tables `folded` and `report` build on top of it fit only up
to about ANALYSED_UP_TO (they ran on 8.5 million slices and ran out on 9.5 and 10
million).  Above that, the command fails with one line (trace_processor.py) and `record`
warns before it writes such a trace (collector/recording/trace.py).  No module here
imports wasmtime or perfetto: `record` uses it.
"""

from __future__ import annotations

# Slices of the largest converted traces measured: 10,009,729 loaded (the heap then at its
# ceiling, ~410 B a slice); `folded` and `report` ran on 8,511,790 (engine RSS 3.6 GB
# after the report) and ran out on 9,501,937.  Traces `record` writes were not measured
# this big: their launch stacks and samples may cost more.
LOADS_UP_TO = 10_000_000
ANALYSED_UP_TO = 8_500_000
# What `record`'s streams hold per slice (kernel or API call with its columns; the H100
# streams in bench/data/cupti_streams: 66-79 B with their fixed part): an estimate that
# errs towards more slices, so the warning comes early rather than late.
STREAM_BYTES_PER_SLICE = 64

ADVICE = (
    "open it with a native trace_processor_shell (--trace-processor PATH, or "
    "XPU_PERF_TRACE_PROCESSOR=PATH), or record less of the run: capture windows "
    "(--capture-range, --delay/--duration) or --max-size, and look at one window with "
    "--window N"
)


_CAPACITY = (
    f"about {ANALYSED_UP_TO / 1e6:.1f} million slices with the tables of `report` and "
    f"`folded`, {LOADS_UP_TO / 1e6:.0f} million for `query`"
)


class EngineMemoryError(RuntimeError):
    """The engine needed more than its heap holds: the trace is too big for it.  Defined
    here, not in wasm_engine.py, so the query path can tell it without importing wasmtime."""


def record_warning(recorded_bytes: int) -> str | None:
    """What `record` says before it writes a trace of `recorded_bytes` of streams too big
    for `report` and `folded` on the embedded engine, or None."""
    slices = recorded_bytes // STREAM_BYTES_PER_SLICE
    if slices <= ANALYSED_UP_TO:
        return None
    return (
        f"xpu-perf record: warning: {recorded_bytes / 1e6:.0f} MB recorded, about "
        f"{slices / 1e6:.1f} million slices: more than `report` and `folded` have room for "
        f"in the embedded trace_processor (about {ANALYSED_UP_TO / 1e6:.1f} million; `query` "
        f"opens about {LOADS_UP_TO / 1e6:.0f} million); {ADVICE}"
    )


def too_big(what: str) -> str:
    """The one line for a trace the embedded engine cannot hold."""
    return (
        f"{what}: too big for the embedded trace_processor (its wasm heap stops at 4 GiB: "
        f"{_CAPACITY}); {ADVICE}"
    )
