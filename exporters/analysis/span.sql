-- The span the analyses look at, and the GPU ops in it.  Needs xpu_views.sql (scope.sql).
-- {span_all} = 0: the active span, from the first GPU op to the end of the last one (what
-- the program drives the GPU in; imports and set-up before it are not idle GPU time);
-- inside capture windows, only the windows' time.  {span_all} = 1: the whole trace (or the
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
  CASE WHEN {span_all} OR ops.ts IS NULL THEN whole.ts ELSE ops.ts END AS ts,
  CASE WHEN {span_all} OR ops.ts IS NULL THEN whole.end_ts ELSE ops.end_ts END AS end_ts,
  max(1, CASE WHEN {span_all} OR ops.ts IS NULL THEN whole.end_ts - whole.ts
              ELSE ops.end_ts - ops.ts END) AS dur,
  CASE WHEN {span_all} THEN 'all' ELSE 'active' END AS kind
FROM ops, whole;

-- The parts of the span analysed: the span itself, or (active span of a trace recorded with
-- capture windows, looked at whole) the capture windows inside it, overlapping windows of
-- different processes merged.  Time between windows was not recorded: never idle.
CREATE PERFETTO TABLE xpu_analysis_region AS
WITH win AS (
  SELECT ts, end_ts FROM xpu_window
  WHERE NOT {span_all} AND NOT EXISTS (SELECT 1 FROM xpu_scope_span)
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

-- Busy islands (the union of the intervals of the ops) per device, of all ops ('any') and
-- of each kind of work: compute kernels, NCCL kernels, copies, sets; overlaps on streams
-- count once.  One sort and running maximum per key: prev_end is the furthest end of the
-- earlier ops of the same device (and kind); an op that starts after it opens an island,
-- which ends at the running maximum just before the next island opens.  The 'any' pass
-- also gives the gaps (gaps.sql) and the report's device busy time (gpu_busy.sql).
-- (Only what the islands and gaps need: gaps.sql looks the next op's call up by id; the
-- op's names and call carried through the sort made it 0.15 s instead of 0.11 at 1M slices.)
CREATE PERFETTO TABLE _xpu_op_reach AS
SELECT id, device_track_id, ts, end_ts, max(end_ts) OVER (
         PARTITION BY device_track_id ORDER BY ts, end_ts
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
FROM xpu_analysis_op;

-- (Each op's kind as a table of its own first: the window sorts it faster than the same
-- expression inside it, 0.03 + 0.12 s against 0.20 s at 1M slices.)
CREATE PERFETTO TABLE _xpu_op_kind AS
SELECT device_track_id,
       CASE WHEN category != 'kernel' THEN category
            WHEN name LIKE 'nccl%' OR name LIKE 'void nccl%' THEN 'nccl'
            ELSE 'compute' END AS kind,
       ts, end_ts
FROM xpu_analysis_op;

CREATE PERFETTO TABLE _xpu_kind_reach AS
SELECT device_track_id, kind, ts, end_ts, max(end_ts) OVER (
         PARTITION BY device_track_id, kind ORDER BY ts, end_ts
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
FROM _xpu_op_kind;

-- Busy islands from ops with their running maximum ($reach: device_track_id, the $key column
-- the islands are per, ts, prev_end; $ends: device_track_id, $key, end_ts of the same ops):
-- an island opens at an op that starts after prev_end and ends at the running maximum just
-- before the next opening; the last one has no next opening and ends at the furthest end
-- of all (looked up for those few rows only).  Also used by the report (gpu_busy.sql).
CREATE PERFETTO MACRO _xpu_islands(
  reach TableOrSubquery, key ColumnName, ends TableOrSubquery
) RETURNS TableOrSubquery AS (
  SELECT o.device_track_id, o.$key AS key, o.ts,
         coalesce(o.end_ts, (SELECT max(e.end_ts) FROM $ends e
                             WHERE e.device_track_id = o.device_track_id AND e.$key = o.$key))
           AS end_ts
  FROM (
    SELECT device_track_id, $key, ts,
           lead(prev_end) OVER (PARTITION BY device_track_id, $key ORDER BY ts) AS end_ts
    FROM $reach WHERE prev_end IS NULL OR ts > prev_end
  ) o
);

-- Every island, unclipped.
CREATE PERFETTO TABLE xpu_busy_island_all AS
SELECT device_track_id, key AS kind, ts, end_ts
FROM _xpu_islands!(
  (SELECT device_track_id, 'any' AS kind, ts, prev_end FROM _xpu_op_reach), kind,
  (SELECT device_track_id, 'any' AS kind, end_ts FROM _xpu_op_reach))
UNION ALL
SELECT device_track_id, key, ts, end_ts
FROM _xpu_islands!(_xpu_kind_reach, kind, _xpu_kind_reach);

-- The islands inside the regions.
CREATE PERFETTO TABLE xpu_analysis_busy_island AS
SELECT m.device_track_id, m.kind, max(m.ts, r.ts) AS ts, min(m.end_ts, r.end_ts) AS end_ts
FROM xpu_busy_island_all m JOIN xpu_analysis_region r ON m.ts < r.end_ts AND m.end_ts > r.ts;
