-- needs: perfetto.engine.scope, perfetto.engine.xpu_views
-- defines: xpu_analysis_op, xpu_analysis_span, xpu_analysis_region
-- params: span_all bool
-- The span the analyses look at, and the GPU ops in it.  Needs xpu_views.sql (scope.sql).
-- $span_all = 0: the active span, from the first GPU op to the end of the last one (what
-- the program drives the GPU in; imports and set-up before it are not idle GPU time);
-- inside capture windows, only the windows' time.  $span_all = 1: the whole trace (or the
-- whole capture window asked for with --window).

-- A GPU op that occupies its device: kernels, copies, sets (sync ops are host waits seen
-- from the GPU side, not GPU work).  device_track_id: the `GPU D (<name>)` track.  The API
-- call that launched it (api_*, its thread utid) is joined once here for every analysis
-- that needs it (gaps, steps, launch statistics).
CREATE PERFETTO TABLE xpu_analysis_op AS
SELECT g.id, g.ts, g.dur, g.ts + g.dur AS end_ts, g.name, g.category, g.api_id,
       t.parent_id AS device_track_id, t.name AS stream,
       a.ts AS api_ts, a.dur AS api_dur, a.name AS api_name, tt.utid
FROM xpu_gpu_op g
JOIN track t ON g.track_id = t.id
LEFT JOIN slice a ON a.id = g.api_id
LEFT JOIN thread_track tt ON tt.id = a.track_id
WHERE g.category IN ('kernel', 'memcpy', 'memset') AND g.dur > 0;

-- One row: ts, end_ts, dur of the analysed span and what it is ('active' or 'all').
CREATE PERFETTO TABLE xpu_analysis_span AS
WITH ops AS (SELECT min(ts) AS ts, max(end_ts) AS end_ts FROM xpu_analysis_op),
scope AS (SELECT min(ts) AS ts, max(end_ts) AS end_ts FROM xpu_scope_span),
whole AS (
  -- A capture window reaches the end of the last op launched inside it.
  SELECT coalesce(scope.ts, tb.start_ts) AS ts,
         coalesce(max(scope.end_ts, coalesce(ops.end_ts, 0)), tb.end_ts) AS end_ts
  FROM trace_bounds tb, scope, ops
)
SELECT
  CASE WHEN $span_all OR ops.ts IS NULL THEN whole.ts ELSE ops.ts END AS ts,
  CASE WHEN $span_all OR ops.ts IS NULL THEN whole.end_ts ELSE ops.end_ts END AS end_ts,
  max(1, CASE WHEN $span_all OR ops.ts IS NULL THEN whole.end_ts - whole.ts
              ELSE ops.end_ts - ops.ts END) AS dur,
  CASE WHEN $span_all THEN 'all' ELSE 'active' END AS kind
FROM ops, whole;

-- The parts of the span analysed: the span itself, or (active span of a trace recorded with
-- capture windows, looked at whole) the capture windows inside it, overlapping windows of
-- different processes merged.  Time between windows was not recorded: never idle.
CREATE PERFETTO TABLE xpu_analysis_region AS
WITH win AS (
  SELECT ts, end_ts FROM xpu_window
  WHERE NOT $span_all AND NOT EXISTS (SELECT 1 FROM xpu_scope_span)
),
reach AS (
  SELECT ts, end_ts, max(end_ts) OVER (
           ORDER BY ts, end_ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM win
),
islands AS (
  SELECT ts, end_ts, sum(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END)
           OVER (ORDER BY ts, end_ts ROWS UNBOUNDED PRECEDING) AS island
  FROM reach
),
merged AS (SELECT min(ts) AS ts, max(end_ts) AS end_ts FROM islands GROUP BY island)
SELECT max(m.ts, s.ts) AS ts, min(m.end_ts, s.end_ts) AS end_ts
FROM merged m, xpu_analysis_span s
WHERE m.ts < s.end_ts AND m.end_ts > s.ts
UNION ALL
SELECT ts, end_ts FROM xpu_analysis_span WHERE NOT EXISTS (SELECT 1 FROM win);

-- The busy islands of the devices (per device, and per kind of work) are merged in numpy
-- from xpu_analysis_op (busy.py): gaps.sql reads their openings (_xpu_op_opening), the
-- step and overlap sums are made from them there.
