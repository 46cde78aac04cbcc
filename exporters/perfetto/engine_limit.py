"""How big a trace the embedded engine opens, and what to say above it.

The embedded trace_processor is a wasm32 module: its heap stops at 4 GiB whatever the
machine has.  Measured on this project's 2-core, 24 GB VM (docs/benchmarks.md, "Big
traces"; bench/scale.py): the engine holds ENGINE_BYTES_PER_SLICE per slice of a converted
Kineto trace once loaded, so it opens about MAX_SLICES (9.7 million) slices; `report` on
8.5 million slices ran within it.  Above that, loading fails with one line
(trace_processor.py) and `record` warns before it writes such a trace
(collector/recording/trace.py).  No module here imports wasmtime or perfetto: `record`
uses it.
"""

from __future__ import annotations

# Engine heap after loading, per slice: 3,605 MB for a converted Kineto trace of 8.5M
# slices (bench/scale.py inputs; 498 MB at 1M, the engine's own ~56 MB included).  Traces
# `record` writes were not measured this big: their launch stacks and samples may cost more.
ENGINE_BYTES_PER_SLICE = 444
HEAP_BYTES = 4 * 1024**3
MAX_SLICES = HEAP_BYTES // ENGINE_BYTES_PER_SLICE
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


class EngineMemoryError(RuntimeError):
    """The engine needed more than its heap holds: the trace is too big for it.  Defined
    here, not in wasm_engine.py, so the query path can tell it without importing wasmtime."""


def record_warning(recorded_bytes: int) -> str | None:
    """What `record` says before it writes a trace of `recorded_bytes` of streams that the
    embedded engine will not open, or None."""
    slices = recorded_bytes // STREAM_BYTES_PER_SLICE
    if slices <= MAX_SLICES:
        return None
    return (
        f"xpu-perf record: warning: {recorded_bytes / 1e6:.0f} MB recorded, about "
        f"{slices / 1e6:.1f} million slices: more than the embedded trace_processor opens "
        f"(about {MAX_SLICES / 1e6:.1f} million); {ADVICE}"
    )


def too_big(what: str) -> str:
    """The one line for a trace the embedded engine cannot hold."""
    return (
        f"{what}: too big for the embedded trace_processor (its wasm heap stops at 4 GiB, "
        f"about {MAX_SLICES / 1e6:.1f} million slices); {ADVICE}"
    )
