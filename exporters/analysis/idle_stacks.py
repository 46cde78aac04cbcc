"""`folded --mode idle` / `flamegraph --mode idle`: what the CPU did while the GPU waited,
as folded stacks weighted by GPU idle time (ns).

Each gap's time goes to the launching thread's stacks, part by part (gaps.sql): its samples
share the host parts they explain (data, other host code, launching code) in proportion to
what they cover, its waits the wait parts (`[waiting in <call>]` on the wait's stack), the
sync part goes to the blocking call's launch stack (`[waiting in <API>]`), the launch path to
the next launch's stack (`[launch] <op>`), the rest to `[GPU idle: other]`."""

from __future__ import annotations

from collections import defaultdict

from collector.frame_names import shorten_stack
from exporters.analysis.analyze import load
from exporters.analysis.tables import DEFAULT_SCOPE, Scope
from exporters.folded.folded import MODES as FOLD_MODES
from exporters.folded.folded import FoldedError, FoldedStacks, fold, load_stack_tables
from exporters.folded.frames import filter_folded
from exporters.perfetto.engine.trace_processor import Trace

_SQL = """
WITH tot AS MATERIALIZED (
  SELECT gap_id, sum(covered_ns) AS c FROM _xpu_gap_sample GROUP BY gap_id
),
wtot AS MATERIALIZED (
  SELECT gap_id, sum(covered_ns) AS c FROM _xpu_gap_wait GROUP BY gap_id
),
sampled AS (
  SELECT g.utid, s.callsite_id,
         s.covered_ns * 1.0 * (g.data_ns - g.data_wait_ns + g.host_ns + g.launch_host_ns)
           / tot.c AS w,
         NULL AS leaf
  FROM _xpu_gap_sample s
  JOIN tot ON tot.gap_id = s.gap_id
  JOIN {gaps} g ON g.id = s.gap_id
  WHERE tot.c > 0 AND g.data_ns - g.data_wait_ns + g.host_ns + g.launch_host_ns > 0
),
waited AS (
  SELECT g.utid, w.callsite_id,
         w.covered_ns * 1.0 * (g.wait_ns + g.data_wait_ns) / wtot.c AS w,
         '[waiting in ' || w.call || ']' AS leaf
  FROM _xpu_gap_wait w
  JOIN wtot ON wtot.gap_id = w.gap_id
  JOIN {gaps} g ON g.id = w.gap_id
  WHERE wtot.c > 0 AND g.wait_ns + g.data_wait_ns > 0
),
calls AS MATERIALIZED (
  SELECT g.utid, b.ts, g.sync_ns AS w, '[waiting in ' || g.block_name || ']' AS leaf
  FROM {gaps} g JOIN slice b ON b.id = g.block_id WHERE g.sync_ns > 0
  UNION ALL
  -- the launch path, and the host's launching where no sample shows its code
  SELECT g.utid, a.ts,
         g.launch_ns - CASE WHEN g.id IN (SELECT gap_id FROM tot WHERE c > 0)
                            THEN g.launch_host_ns ELSE 0 END,
         '[launch] ' || g.next_op
  FROM {gaps} g JOIN slice a ON a.id = g.api_id WHERE g.launch_ns > 0
),
called AS (
  SELECT c.utid, ls.callsite_id, c.w, c.leaf FROM calls c
  LEFT JOIN _xpu_launch_stack_at ls ON ls.ts = c.ts AND ls.utid = c.utid
),
unsampled AS (
  -- host time of gaps with no sample (the CPU slices' guess), and the rest
  SELECT g.utid, NULL AS callsite_id,
         g.other_ns + CASE WHEN g.id IN (SELECT gap_id FROM tot WHERE c > 0) THEN 0
                           ELSE g.data_ns - g.data_wait_ns + g.host_ns END
         + CASE WHEN g.id IN (SELECT gap_id FROM wtot WHERE c > 0) THEN 0
                ELSE g.wait_ns + g.data_wait_ns END
         + CASE WHEN g.api_id IS NULL THEN g.launch_ns ELSE 0 END AS w,
         '[GPU idle: other]' AS leaf
  FROM {gaps} g
)
SELECT coalesce(r.root, 'no thread') || coalesce(';' || cp.path, '')
       || coalesce(';' || replace(x.leaf, ';', ':'), '') AS stack,
       -- the frames' modules, '' for the root and the leaf (exporters/folded/frames.py)
       coalesce(';' || cp.modules, '') || CASE WHEN x.leaf IS NULL THEN '' ELSE ';' END
         AS modules,
       sum(x.w) AS weight_ns
FROM (SELECT * FROM sampled UNION ALL SELECT * FROM waited UNION ALL SELECT * FROM called
      UNION ALL SELECT * FROM unsampled) x
LEFT JOIN xpu_thread_root r USING (utid)
LEFT JOIN xpu_callsite_path cp USING (callsite_id)
WHERE x.w > 0
GROUP BY stack, modules
"""


def fold_idle(
    trace: Trace,
    full_names: bool = False,
    window: int | None = None,
    scope: Scope = DEFAULT_SCOPE,
    all_frames: bool = False,
    focus: bool = False,
) -> FoldedStacks:
    """The idle stacks of the gaps in the analysed span, or (`focus`) of those the findings
    and the report's idle table count (xpu_focus_gap); frames read as the other modes show
    them (filtered unless all_frames). gpu_weight_ns: the GPU idle time behind the lines."""
    load(trace, scope, window)
    load_stack_tables(trace, window)
    weights: dict[str, float] = defaultdict(float)
    sql = _SQL.replace("{gaps}", "xpu_focus_gap" if focus else "xpu_gpu_gap")
    for row in trace.query(sql):
        stack = filter_folded(str(row["stack"]), row["modules"], all_frames)
        weights[stack if full_names else shorten_stack(stack)] += float(row["weight_ns"])
    lines = sorted((s, round(w)) for s, w in weights.items())
    return FoldedStacks(lines, "ns", round(sum(weights.values())), 0)


MODES = (*FOLD_MODES, "idle")


def fold_mode(
    trace: Trace,
    mode: str,
    unit: str = "ns",
    freq: float | None = None,
    full_names: bool = False,
    window: int | None = None,
    all_frames: bool = False,
    between: tuple[int, int] | None = None,
    focus: bool = False,
) -> FoldedStacks:
    """`fold()` for its modes (GPU ops and samples in `between` where given), `fold_idle()`
    for `idle` (ns or us; samples mean nothing for idle time): the gaps of the whole trace
    where `between` is None, else of the active span, only those the findings count with
    `focus`."""
    if mode != "idle":
        return fold(
            trace,
            mode,
            unit,
            freq,
            full_names=full_names,
            window=window,
            all_frames=all_frames,
            between=between,
        )
    if unit == "samples":
        raise FoldedError("--mode idle is weighted by GPU idle time: use --unit ns or us")
    scope = Scope(span_all=between is None)
    stacks = fold_idle(trace, full_names, window, scope, all_frames, focus)
    if unit == "us":
        stacks = FoldedStacks(
            [(s, w / 1000) for s, w in stacks.lines], "us", stacks.gpu_weight_ns, 0
        )
    return stacks
