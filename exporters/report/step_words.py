"""The analysed steps in words, one way for every output (`report`, `folded`, `flamegraph`,
`view`): `steps 2-12`, numbered within each process as the report's step table numbers them,
and `of 2 processes` where several ran them (two ranks of 12 steps are steps 2-12 of 2
processes, not steps 2-24)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from exporters.perfetto.engine.trace_processor import Trace


def steps_in(trace: Trace, start: int, end: int) -> str:
    """The steps (`xpu_step`, exporters/analysis/steps.sql) that start in [start, end)."""
    rows = trace.query(
        "select upid, min(k) as first, max(k) as last from ("
        "  select upid, ts, row_number() over (partition by upid order by ts) as k"
        "  from xpu_step"
        f") where ts >= {int(start)} and ts < {int(end)} group by upid"
    )
    if not rows:
        return "the analysed steps"
    first = min(int(r["first"]) for r in rows)
    last = max(int(r["last"]) for r in rows)
    what = f"steps {first}-{last}" if last > first else f"step {first}"
    if len(rows) > 1:
        what += f" of {len(rows)} processes"
    return what
