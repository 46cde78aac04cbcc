-- Steps: the repeating unit of work the span is made of.  Needs span.sql and gaps.sql.
-- Marked steps: slices on a thread named like {steps_glob} (torch.profiler's ProfilerStep#N,
-- an NVTX range).  Where none is marked and {detect} = 1, steps are found in the sequence of
-- launches of the thread that launches most: the op name each launch starts with is a
-- symbol; a symbol that recurs at a constant distance (in launches) is once per step; the
-- distance shared by most such symbols is the step's length, and the occurrences of the one
-- of them seen first are the step boundaries.

CREATE PERFETTO TABLE _xpu_marked_step AS
SELECT s.id AS slice_id, s.ts, s.dur, s.name, s.utid, t.upid
FROM xpu_thread_slice s
JOIN thread t USING (utid)
JOIN xpu_analysis_span sp ON s.ts < sp.end_ts AND s.ts + s.dur > sp.ts
WHERE s.name GLOB '{steps_glob}' AND s.dur > 0
  -- the outermost of nested slices of the same name
  AND NOT EXISTS (SELECT 1 FROM ancestor_slice(s.id) a WHERE a.name GLOB '{steps_glob}');

-- The launches of the thread with most launches in the span, in order, with the name of
-- their first op.
CREATE PERFETTO TABLE _xpu_launch_seq AS
WITH calls AS (
  SELECT o.api_id, min(o.id) AS op_id FROM xpu_analysis_op o
  WHERE o.api_id IS NOT NULL AND {detect} AND NOT EXISTS (SELECT 1 FROM _xpu_marked_step)
  GROUP BY o.api_id
),
located AS (
  SELECT c.api_id, a.ts, tt.utid, o.name AS symbol
  FROM calls c
  JOIN slice a ON a.id = c.api_id
  JOIN thread_track tt ON tt.id = a.track_id
  JOIN slice o ON o.id = c.op_id
),
main AS (SELECT utid FROM located GROUP BY utid ORDER BY count(*) DESC LIMIT 1)
SELECT row_number() OVER (ORDER BY ts, api_id) AS i, api_id, ts, utid, symbol
FROM located WHERE utid = (SELECT utid FROM main);

-- Per symbol: how often, and the most common distance between its occurrences.
CREATE PERFETTO TABLE _xpu_launch_symbol AS
WITH dist AS (
  SELECT symbol, i, i - lag(i) OVER (PARTITION BY symbol ORDER BY i) AS d FROM _xpu_launch_seq
),
per_d AS (
  SELECT symbol, d, count(*) AS n FROM dist WHERE d IS NOT NULL GROUP BY symbol, d
),
best AS (
  SELECT symbol, d, n, row_number() OVER (PARTITION BY symbol ORDER BY n DESC, d) AS r
  FROM per_d
)
SELECT b.symbol, b.d AS period, b.n AS regular, c.n AS occurrences, c.first_i
FROM best b
JOIN (SELECT symbol, count(*) AS n, min(i) AS first_i FROM _xpu_launch_seq GROUP BY symbol) c
  USING (symbol)
WHERE b.r = 1;

-- Symbols that recur regularly over most of the launches: at least 3 times, 60% of the
-- distances equal to the most common one, and covering half the sequence.
CREATE PERFETTO TABLE _xpu_step_period AS
WITH total AS (SELECT count(*) AS n FROM _xpu_launch_seq),
regular AS (
  SELECT s.* FROM _xpu_launch_symbol s, total
  WHERE s.occurrences >= 3 AND s.period > 1
    AND s.regular >= 0.6 * (s.occurrences - 1)
    AND s.occurrences * s.period >= 0.5 * total.n
)
SELECT period, count(*) AS symbols FROM regular GROUP BY period
ORDER BY symbols DESC, period LIMIT 1;

CREATE PERFETTO TABLE _xpu_step_anchor AS
SELECT s.symbol, s.period FROM _xpu_launch_symbol s
JOIN _xpu_step_period p USING (period)
WHERE s.regular >= 0.6 * (s.occurrences - 1)
ORDER BY s.first_i LIMIT 1;

-- Detected steps: from one occurrence of the anchor to the next; the last one to the end of
-- the op of the launch a period later, when the sequence goes on that long.
CREATE PERFETTO TABLE _xpu_detected_step AS
WITH occ AS (
  SELECT q.i, q.ts, q.utid, lead(q.ts) OVER (ORDER BY q.i) AS next_ts
  FROM _xpu_launch_seq q JOIN _xpu_step_anchor a ON a.symbol = q.symbol
),
last_end AS (
  SELECT o.i, (SELECT max(op.end_ts) FROM _xpu_launch_seq q2
               JOIN xpu_analysis_op op ON op.api_id = q2.api_id
               WHERE q2.i = o.i + (SELECT period FROM _xpu_step_anchor) - 1) AS end_ts
  FROM occ o WHERE o.next_ts IS NULL
)
SELECT o.ts, coalesce(o.next_ts, l.end_ts) - o.ts AS dur, o.utid
FROM occ o LEFT JOIN last_end l USING (i)
WHERE coalesce(o.next_ts, l.end_ts) IS NOT NULL;

-- The steps: marked, else detected; source says how each boundary was found.
CREATE PERFETTO TABLE xpu_step AS
WITH s AS (
  SELECT ts, dur, utid, name, 'marked' AS source FROM _xpu_marked_step
  UNION ALL
  SELECT ts, dur, utid, NULL, 'detected: launch sequence repeats every '
         || (SELECT period FROM _xpu_step_anchor) || ' launches'
  FROM _xpu_detected_step
)
SELECT row_number() OVER (ORDER BY t.upid, s.ts) AS step, s.ts, s.dur, s.ts + s.dur AS end_ts,
       s.utid, t.upid, coalesce(s.name, 'step ' || row_number() OVER (ORDER BY t.upid, s.ts))
       AS name, s.source
FROM s JOIN thread t USING (utid);

-- The devices each process launched onto (a step is measured on its process's devices).
CREATE PERFETTO TABLE _xpu_process_device AS
SELECT DISTINCT t.upid, o.device_track_id
FROM xpu_analysis_op o
JOIN slice a ON a.id = o.api_id
JOIN thread_track tt ON tt.id = a.track_id
JOIN thread t USING (utid);

CREATE PERFETTO INDEX _xpu_busy_island_ts ON xpu_analysis_busy_island(ts);

-- Per step: GPU busy by kind of work (summed over the process's devices) and idle.
CREATE PERFETTO TABLE _xpu_step_device AS
SELECT st.step, st.ts, st.end_ts, coalesce(pd.device_track_id, d.device_track_id) AS device
FROM xpu_step st
LEFT JOIN _xpu_process_device pd ON pd.upid = st.upid
LEFT JOIN (SELECT DISTINCT device_track_id FROM xpu_analysis_op) d ON pd.upid IS NULL;

CREATE PERFETTO TABLE xpu_step_busy AS
WITH busy AS MATERIALIZED (
  -- Islands are ordered by start; one starting up to the longest island's length before
  -- the step can still reach into it, so the index on ts bounds the search.
  SELECT dv.step, i.kind, sum(min(i.end_ts, dv.end_ts) - max(i.ts, dv.ts)) AS ns
  FROM _xpu_step_device dv
  JOIN xpu_analysis_busy_island i
    ON i.ts < dv.end_ts
   AND i.ts > dv.ts - (SELECT coalesce(max(end_ts - ts), 0) FROM xpu_analysis_busy_island)
  WHERE i.device_track_id = dv.device AND i.end_ts > dv.ts
  GROUP BY dv.step, i.kind
),
devices AS MATERIALIZED (SELECT step, count(*) AS n FROM _xpu_step_device GROUP BY step)
SELECT st.step, st.name, st.ts, st.dur, st.source, dv.n AS devices,
       coalesce(sum(CASE WHEN b.kind = 'compute' THEN b.ns END), 0) AS compute_ns,
       coalesce(sum(CASE WHEN b.kind = 'nccl' THEN b.ns END), 0) AS nccl_ns,
       coalesce(sum(CASE WHEN b.kind = 'memcpy' THEN b.ns END), 0) AS memcpy_ns,
       coalesce(sum(CASE WHEN b.kind = 'memset' THEN b.ns END), 0) AS memset_ns,
       coalesce(sum(CASE WHEN b.kind = 'any' THEN b.ns END), 0) AS busy_ns
FROM xpu_step st
JOIN devices dv ON dv.step = st.step
LEFT JOIN busy b ON b.step = st.step
GROUP BY st.step;
