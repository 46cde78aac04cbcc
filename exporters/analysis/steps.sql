-- needs: perfetto.engine.xpu_views, analysis.span
-- defines: _xpu_marked_step, _xpu_launch_call, _xpu_graph_step, _xpu_launch_seq,
--   _xpu_launch_symbol, _xpu_step_symbol, _xpu_step_period, _xpu_step_anchor,
--   _xpu_detected_step, xpu_step, _xpu_process_device, _xpu_step_device, xpu_analysis_focus
-- params: steps_on bool, steps_glob str, detect bool
-- Steps: the repeating unit of work the span is made of.  Needs span.sql (not gaps.sql:
-- the span the findings cover is known without the gaps, tables.load_steps).
-- Marked steps: slices on a thread named like $steps_glob (torch.profiler's ProfilerStep#N,
-- an NVTX range, a repeating range step_ranges.py found; $steps_on = 0: none).  Where none
-- is marked: each process's CUDA graph launches, where it replays a graph at least 3 times
-- (each replay a step); else, where $detect = 1, steps are found in the sequence of
-- launches of each process (each rank on its own): the op name each launch starts with is
-- a symbol; a symbol that recurs at one distance (in launches) all along is
-- once per step; the distance shared by most such symbols is the step's length, and the
-- occurrences of the one of them seen first are the step boundaries.

CREATE PERFETTO TABLE _xpu_marked_step AS
SELECT s.id AS slice_id, s.ts, s.dur, s.name, s.utid, t.upid
FROM xpu_thread_slice s
JOIN thread t USING (utid)
JOIN xpu_analysis_span sp ON s.ts < sp.end_ts AND s.ts + s.dur > sp.ts
WHERE $steps_on AND s.name GLOB $steps_glob AND s.dur > 0
  -- the outermost of nested slices of the same name
  AND NOT EXISTS (SELECT 1 FROM ancestor_slice(s.id) a WHERE a.name GLOB $steps_glob);

-- Each rank (process) is detected on its own: the processes that launch GPU work, at least
-- a tenth as much as the one that launches most (a helper process's few launches are no
-- loop).  Their launches, with the name of their first op.
CREATE PERFETTO TABLE _xpu_launch_call AS
WITH calls AS (
  -- The first op of each call (SQLite takes the bare columns from the row of the min()).
  SELECT o.api_id, min(o.id) AS op_id, o.name AS symbol, o.api_ts AS ts, o.utid, o.api_name
  FROM xpu_analysis_op o
  WHERE o.api_ts IS NOT NULL AND NOT EXISTS (SELECT 1 FROM _xpu_marked_step)
  GROUP BY o.api_id
),
located AS (
  SELECT c.api_id, c.ts, c.utid, t.upid, c.symbol, c.api_name
  FROM calls c JOIN thread t USING (utid)
),
per AS (SELECT upid, count(*) AS n FROM located GROUP BY upid)
SELECT l.* FROM located l JOIN per USING (upid)
WHERE per.n >= 0.1 * (SELECT max(n) FROM per);

-- CUDA graph replays, per process replaying a graph at least 3 times: each launch to the
-- next, the last to the end of its ops.
CREATE PERFETTO TABLE _xpu_graph_step AS
WITH g AS (
  SELECT c.api_id, c.ts, c.utid, c.upid,
         (SELECT max(o.end_ts) FROM xpu_analysis_op o WHERE o.api_id = c.api_id) AS ops_end
  FROM _xpu_launch_call c WHERE c.api_name GLOB '*GraphLaunch*'
),
seq AS (
  SELECT ts, utid, upid, ops_end, lead(ts) OVER (PARTITION BY upid ORDER BY ts) AS next_ts,
         count(*) OVER (PARTITION BY upid) AS n
  FROM g
)
SELECT ts, coalesce(next_ts, ops_end) - ts AS dur, utid, upid FROM seq
WHERE n >= 3 AND coalesce(next_ts, ops_end) > ts;

-- The launches of each process (all its threads: PyTorch's backward launches from the
-- autograd thread while the main thread waits) that replays no graph, in order.
CREATE PERFETTO TABLE _xpu_launch_seq AS
SELECT upid, row_number() OVER (PARTITION BY upid ORDER BY ts, api_id) AS i, api_id, ts, utid,
       symbol
FROM _xpu_launch_call
WHERE $detect AND upid NOT IN (SELECT upid FROM _xpu_graph_step);

-- Per process and symbol: how often, over which stretch, the most common distance between
-- its occurrences and how many distances are within a tolerance of it (an op inserted now
-- and then, such as a copy for logging every N steps, shifts a distance by one or two).
CREATE PERFETTO TABLE _xpu_launch_symbol AS
WITH dist AS (
  SELECT upid, symbol, i, i - lag(i) OVER (PARTITION BY upid, symbol ORDER BY i) AS d
  FROM _xpu_launch_seq
),
per_d AS (
  SELECT upid, symbol, d, count(*) AS n FROM dist WHERE d IS NOT NULL GROUP BY upid, symbol, d
),
mode AS (
  SELECT upid, symbol, d FROM (
    SELECT upid, symbol, d,
           row_number() OVER (PARTITION BY upid, symbol ORDER BY n DESC, d) AS r
    FROM per_d
  ) WHERE r = 1
),
near AS (
  SELECT m.upid, m.symbol, m.d, sum(p.n) AS regular
  FROM mode m JOIN per_d p ON p.upid = m.upid AND p.symbol = m.symbol
  WHERE abs(p.d - m.d) <= max(2, m.d / 50)
  GROUP BY m.upid, m.symbol
)
SELECT n.upid, n.symbol, n.d AS period, n.regular, c.n AS occurrences, c.first_i, c.last_i
FROM near n
JOIN (SELECT upid, symbol, count(*) AS n, min(i) AS first_i, max(i) AS last_i
      FROM _xpu_launch_seq GROUP BY upid, symbol) c
  ON c.upid = n.upid AND c.symbol = n.symbol;

-- Symbols that recur all along: at least 3 times, 80% of the distances at the common one,
-- densely (their occurrences at that distance fill 90% of their stretch: a layer's kernel
-- recurs regularly inside a step but not across the rest of it), over at least half of the
-- process's launches.  Their distances are the candidate step lengths.  A candidate that
-- is a multiple of a shorter one (a copy every 10 steps for logging, an op every other
-- step) is that shorter one repeated; of the rest, the longest is the step (a step made of
-- identical layers plus a few other ops recurs at the step's length and at the layer's,
-- which does not divide it).  A loop of nothing but identical blocks is ambiguous: the
-- block is taken.
CREATE PERFETTO TABLE _xpu_step_symbol AS
SELECT s.* FROM _xpu_launch_symbol s
JOIN (SELECT upid, count(*) AS n FROM _xpu_launch_seq GROUP BY upid) total USING (upid)
WHERE s.occurrences >= 3 AND s.period > 1
  AND s.regular >= 0.8 * (s.occurrences - 1)
  AND (s.occurrences - 1) * s.period >= 0.9 * (s.last_i - s.first_i)
  AND s.last_i - s.first_i >= 0.5 * total.n;

CREATE PERFETTO TABLE _xpu_step_period AS
WITH p AS (
  SELECT upid, period, count(*) AS symbols FROM _xpu_step_symbol GROUP BY upid, period
),
kept AS (
  SELECT a.upid, a.period, a.symbols FROM p a
  WHERE NOT EXISTS (
    SELECT 1 FROM p b
    WHERE b.upid = a.upid AND b.period < a.period
      AND (a.period % b.period <= max(1, a.period / 100)
           OR b.period - a.period % b.period <= max(1, a.period / 100))
  )
)
SELECT upid, period, symbols FROM (
  SELECT *, row_number() OVER (PARTITION BY upid ORDER BY period DESC) AS r FROM kept
) WHERE r = 1;

-- The boundary symbol per process: of those at the step's length, the most regular (a
-- symbol also used in set-up, such as a host-to-device copy, is less so), then the first
-- seen.
CREATE PERFETTO TABLE _xpu_step_anchor AS
SELECT upid, symbol, period FROM (
  SELECT s.upid, s.symbol, s.period,
         row_number() OVER (PARTITION BY s.upid
                            ORDER BY 1.0 * s.regular / (s.occurrences - 1) DESC, s.first_i) AS r
  FROM _xpu_step_symbol s
  JOIN _xpu_step_period p ON p.upid = s.upid AND p.period = s.period
) WHERE r = 1;

-- Detected steps: from one occurrence of the anchor to the next; the last one to the end of
-- the op of the launch a period later, when the sequence goes on that long.
CREATE PERFETTO TABLE _xpu_detected_step AS
WITH last_i AS (SELECT upid, max(i) AS n FROM _xpu_launch_seq GROUP BY upid),
all_occ AS (
  SELECT q.upid, q.i, q.ts, q.utid, a.period,
         lead(q.i) OVER (PARTITION BY q.upid ORDER BY q.i) - q.i AS next_d,
         q.i - lag(q.i) OVER (PARTITION BY q.upid ORDER BY q.i) AS prev_d
  FROM _xpu_launch_seq q JOIN _xpu_step_anchor a ON a.upid = q.upid AND a.symbol = q.symbol
),
occ AS (
  -- Only the occurrences one step apart from a neighbour: the loop, not set-up.
  SELECT upid, i, ts, utid, period,
         lead(ts) OVER (PARTITION BY upid ORDER BY i) AS next_ts FROM all_occ
  WHERE abs(next_d - period) <= max(2, period / 50) OR abs(prev_d - period) <= max(2, period / 50)
),
last_end AS (
  -- The last step: to the end of the op of the launch a period later, or of the last
  -- launch where at least half a period follows.
  SELECT o.upid, o.i,
         (SELECT max(op.end_ts) FROM _xpu_launch_seq q2
          JOIN xpu_analysis_op op ON op.api_id = q2.api_id
          WHERE q2.upid = o.upid AND q2.i = min(o.i + o.period - 1, l.n)
            AND l.n - o.i + 1 >= o.period / 2) AS end_ts
  FROM occ o JOIN last_i l USING (upid) WHERE o.next_ts IS NULL
)
SELECT o.upid, o.ts, coalesce(o.next_ts, l.end_ts) - o.ts AS dur, o.utid,
       o.period
FROM occ o LEFT JOIN last_end l ON l.upid = o.upid AND l.i = o.i
WHERE coalesce(o.next_ts, l.end_ts) IS NOT NULL;

-- The steps: marked, else graph replays, else detected (per process); source says how
-- each boundary was found.
CREATE PERFETTO TABLE xpu_step AS
WITH s AS (
  SELECT ts, dur, utid, name, 'marked' AS source FROM _xpu_marked_step
  UNION ALL
  SELECT ts, dur, utid, NULL, 'CUDA graph launches (each replay a step)' FROM _xpu_graph_step
  UNION ALL
  SELECT ts, dur, utid, NULL, 'detected: launch sequence repeats every ' || period
         || ' launches'
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
-- least 3 steps were found; else, and with `--span all` (the whole trace asked for, set-up
-- and warm-up included), the whole analysed span.
CREATE PERFETTO TABLE xpu_analysis_focus AS
WITH steady AS (
  SELECT min(ts) AS ts FROM (
    SELECT ts, row_number() OVER (PARTITION BY upid ORDER BY ts) AS k FROM xpu_step
  ) WHERE k > 1
),
n AS (SELECT count(*) AS steps FROM xpu_step),
f AS (
  SELECT sp.*, n.steps, n.steps >= 3 AND sp.kind != 'all' AS steady_only, steady.ts AS steady_ts
  FROM steady, n, xpu_analysis_span sp
)
SELECT CASE WHEN steady_only THEN steady_ts ELSE ts END AS ts,
       end_ts,
       max(1, end_ts - CASE WHEN steady_only THEN steady_ts ELSE ts END) AS dur,
       CASE WHEN steady_only THEN 'steps' ELSE kind END AS kind,
       steps
FROM f;
