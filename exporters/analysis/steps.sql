-- Steps: the repeating unit of work the span is made of.  Needs span.sql and gaps.sql.
-- Marked steps: slices on a thread named like {steps_glob} (torch.profiler's ProfilerStep#N,
-- an NVTX range, a repeating range step_ranges.py found; {steps_on} = 0: none).  Where none
-- is marked: the CUDA graph launches of the process that launches most, where it replays a
-- graph at least 3 times (each replay a step); else, where {detect} = 1, steps are found in
-- the sequence of launches of the process that launches most: the op name each launch
-- starts with is a symbol; a symbol that recurs at one distance (in launches) all along is
-- once per step; the distance shared by most such symbols is the step's length, and the
-- occurrences of the one of them seen first are the step boundaries.

CREATE PERFETTO TABLE _xpu_marked_step AS
SELECT s.id AS slice_id, s.ts, s.dur, s.name, s.utid, t.upid
FROM xpu_thread_slice s
JOIN thread t USING (utid)
JOIN xpu_analysis_span sp ON s.ts < sp.end_ts AND s.ts + s.dur > sp.ts
WHERE {steps_on} AND s.name GLOB '{steps_glob}' AND s.dur > 0
  -- the outermost of nested slices of the same name
  AND NOT EXISTS (SELECT 1 FROM ancestor_slice(s.id) a WHERE a.name GLOB '{steps_glob}');

-- CUDA graph replays of the process that launches most: each launch to the next, the last
-- to the end of its ops.
CREATE PERFETTO TABLE _xpu_graph_step AS
WITH main AS (
  SELECT t.upid FROM xpu_analysis_op o JOIN thread t USING (utid)
  WHERE o.api_ts IS NOT NULL GROUP BY t.upid ORDER BY count(*) DESC LIMIT 1
),
g AS (
  SELECT o.api_id, o.api_ts AS ts, o.utid, max(o.end_ts) AS ops_end
  FROM xpu_analysis_op o JOIN thread t USING (utid)
  WHERE o.api_name GLOB '*GraphLaunch*' AND t.upid = (SELECT upid FROM main)
    AND NOT EXISTS (SELECT 1 FROM _xpu_marked_step)
  GROUP BY o.api_id
),
seq AS (SELECT ts, utid, ops_end, lead(ts) OVER (ORDER BY ts) AS next_ts FROM g)
SELECT ts, coalesce(next_ts, ops_end) - ts AS dur, utid FROM seq
WHERE (SELECT count(*) FROM g) >= 3 AND coalesce(next_ts, ops_end) > ts;

-- The launches of the process with most launches in the span (all its threads: PyTorch's
-- backward launches from the autograd thread while the main thread waits), in order, with
-- the name of their first op.
CREATE PERFETTO TABLE _xpu_launch_seq AS
WITH calls AS (
  -- The first op of each call (SQLite takes the bare columns from the row of the min()).
  SELECT o.api_id, min(o.id) AS op_id, o.name AS symbol, o.api_ts AS ts, o.utid
  FROM xpu_analysis_op o
  WHERE o.api_ts IS NOT NULL AND {detect} AND NOT EXISTS (SELECT 1 FROM _xpu_marked_step)
    AND NOT EXISTS (SELECT 1 FROM _xpu_graph_step)
  GROUP BY o.api_id
),
located AS (
  SELECT c.api_id, c.ts, c.utid, t.upid, c.symbol FROM calls c JOIN thread t USING (utid)
),
main AS (SELECT upid FROM located GROUP BY upid ORDER BY count(*) DESC LIMIT 1)
SELECT row_number() OVER (ORDER BY ts, api_id) AS i, api_id, ts, utid, symbol
FROM located WHERE upid = (SELECT upid FROM main);

-- Per symbol: how often, over which stretch, the most common distance between its
-- occurrences and how many distances are within a tolerance of it (an op inserted now and
-- then, such as a copy for logging every N steps, shifts a distance by one or two).
CREATE PERFETTO TABLE _xpu_launch_symbol AS
WITH dist AS (
  SELECT symbol, i, i - lag(i) OVER (PARTITION BY symbol ORDER BY i) AS d FROM _xpu_launch_seq
),
per_d AS (
  SELECT symbol, d, count(*) AS n FROM dist WHERE d IS NOT NULL GROUP BY symbol, d
),
mode AS (
  SELECT symbol, d FROM (
    SELECT symbol, d, row_number() OVER (PARTITION BY symbol ORDER BY n DESC, d) AS r
    FROM per_d
  ) WHERE r = 1
),
near AS (
  SELECT m.symbol, m.d, sum(p.n) AS regular
  FROM mode m JOIN per_d p ON p.symbol = m.symbol
  WHERE abs(p.d - m.d) <= max(2, m.d / 50)
  GROUP BY m.symbol
)
SELECT n.symbol, n.d AS period, n.regular, c.n AS occurrences, c.first_i, c.last_i
FROM near n
JOIN (SELECT symbol, count(*) AS n, min(i) AS first_i, max(i) AS last_i
      FROM _xpu_launch_seq GROUP BY symbol) c
  USING (symbol);

-- Symbols that recur all along: at least 3 times, 80% of the distances at the common one,
-- densely (their occurrences at that distance fill 90% of their stretch: a layer's kernel
-- recurs regularly inside a step but not across the rest of it), over at least half of the
-- launches.  Their distances are the candidate step lengths.  A candidate that is a
-- multiple of a shorter one (a copy every 10 steps for logging, an op every other step) is
-- that shorter one repeated; of the rest, the longest is the step (a step made of identical
-- layers plus a few other ops recurs at the step's length and at the layer's, which does
-- not divide it).  A loop of nothing but identical blocks is ambiguous: the block is taken.
CREATE PERFETTO TABLE _xpu_step_symbol AS
SELECT s.* FROM _xpu_launch_symbol s, (SELECT count(*) AS n FROM _xpu_launch_seq) total
WHERE s.occurrences >= 3 AND s.period > 1
  AND s.regular >= 0.8 * (s.occurrences - 1)
  AND (s.occurrences - 1) * s.period >= 0.9 * (s.last_i - s.first_i)
  AND s.last_i - s.first_i >= 0.5 * total.n;

CREATE PERFETTO TABLE _xpu_step_period AS
WITH p AS (SELECT period, count(*) AS symbols FROM _xpu_step_symbol GROUP BY period)
SELECT a.period, a.symbols FROM p a
WHERE NOT EXISTS (
  SELECT 1 FROM p b
  WHERE b.period < a.period
    AND (a.period % b.period <= max(1, a.period / 100)
         OR b.period - a.period % b.period <= max(1, a.period / 100))
)
ORDER BY a.period DESC LIMIT 1;

-- The boundary symbol: of those at the step's length, the most regular (a symbol also
-- used in set-up, such as a host-to-device copy, is less so), then the first seen.
CREATE PERFETTO TABLE _xpu_step_anchor AS
SELECT s.symbol, s.period FROM _xpu_step_symbol s
JOIN _xpu_step_period p USING (period)
ORDER BY 1.0 * s.regular / (s.occurrences - 1) DESC, s.first_i LIMIT 1;

-- Detected steps: from one occurrence of the anchor to the next; the last one to the end of
-- the op of the launch a period later, when the sequence goes on that long.
CREATE PERFETTO TABLE _xpu_detected_step AS
WITH all_occ AS (
  SELECT q.i, q.ts, q.utid, a.period,
         lead(q.i) OVER (ORDER BY q.i) - q.i AS next_d, q.i - lag(q.i) OVER (ORDER BY q.i) AS prev_d
  FROM _xpu_launch_seq q JOIN _xpu_step_anchor a ON a.symbol = q.symbol
),
occ AS (
  -- Only the occurrences one step apart from a neighbour: the loop, not set-up.
  SELECT i, ts, utid, lead(ts) OVER (ORDER BY i) AS next_ts FROM all_occ
  WHERE abs(next_d - period) <= max(2, period / 50) OR abs(prev_d - period) <= max(2, period / 50)
),
last_end AS (
  -- The last step: to the end of the op of the launch a period later, or of the last
  -- launch where at least half a period follows.
  SELECT o.i, (SELECT max(op.end_ts) FROM _xpu_launch_seq q2
               JOIN xpu_analysis_op op ON op.api_id = q2.api_id
               WHERE q2.i = min(o.i + a.period - 1, (SELECT max(i) FROM _xpu_launch_seq))
                 AND (SELECT max(i) FROM _xpu_launch_seq) - o.i + 1 >= a.period / 2) AS end_ts
  FROM occ o, _xpu_step_anchor a WHERE o.next_ts IS NULL
)
SELECT o.ts, coalesce(o.next_ts, l.end_ts) - o.ts AS dur, o.utid
FROM occ o LEFT JOIN last_end l USING (i)
WHERE coalesce(o.next_ts, l.end_ts) IS NOT NULL;

-- The steps: marked, else detected; source says how each boundary was found.
CREATE PERFETTO TABLE xpu_step AS
WITH s AS (
  SELECT ts, dur, utid, name, 'marked' AS source FROM _xpu_marked_step
  UNION ALL
  SELECT ts, dur, utid, NULL, 'CUDA graph launches (each replay a step)' FROM _xpu_graph_step
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

-- Per step: GPU busy by kind of work (summed over the process's devices) and idle.
CREATE PERFETTO TABLE _xpu_step_device AS
SELECT st.step, st.ts, st.end_ts, coalesce(pd.device_track_id, d.device_track_id) AS device
FROM xpu_step st
LEFT JOIN _xpu_process_device pd ON pd.upid = st.upid
LEFT JOIN (SELECT DISTINCT device_track_id FROM xpu_analysis_op) d ON pd.upid IS NULL;

-- What the findings look at: from each process's second step to the end of the active
-- span (set-up before the loop and the first step, its warm-up: lazy kernel loading,
-- allocator growth, autotuning, are left out; what follows the steps stays in), where at
-- least 3 steps were found; else the whole analysed span.
CREATE PERFETTO TABLE xpu_analysis_focus AS
WITH steady AS (
  SELECT min(ts) AS ts FROM (
    SELECT ts, row_number() OVER (PARTITION BY upid ORDER BY ts) AS k FROM xpu_step
  ) WHERE k > 1
),
n AS (SELECT count(*) AS steps FROM xpu_step)
SELECT CASE WHEN n.steps >= 3 THEN steady.ts ELSE sp.ts END AS ts,
       sp.end_ts,
       max(1, sp.end_ts - CASE WHEN n.steps >= 3 THEN steady.ts ELSE sp.ts END) AS dur,
       CASE WHEN n.steps >= 3 THEN 'steps' ELSE sp.kind END AS kind,
       n.steps AS steps
FROM steady, n, xpu_analysis_span sp;

-- The gaps the findings explain: those starting in the focus.
CREATE PERFETTO VIEW xpu_focus_gap AS
SELECT g.* FROM xpu_gpu_gap g, xpu_analysis_focus f
WHERE g.ts >= f.ts AND g.ts < f.end_ts;
