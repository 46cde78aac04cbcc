-- needs: perfetto.engine.xpu_views, report.gpu_busy
-- defines: xpu_rank_op, xpu_rank_island, xpu_rank_exposed, xpu_rank_step, xpu_rank_collective,
--   xpu_rank_arrival, xpu_rank_gpu, xpu_rank
-- params: steps str
-- Per rank (process): GPU busy, computation vs communication (NCCL kernels), the
-- communication not hidden by computation, and step times.  Needs xpu_views.sql and
-- gpu_busy.sql (xpu_report_window); $steps is a GLOB pattern of step slice names.
-- The table is xpu_rank; ranks.py selects it after the script, so one script answers on
-- one trace or on many (batch).

-- Each GPU op with its process: the one whose API call launched it (the flow), or for an
-- op without a flow the process that launched most ops on the same device.  A device is
-- the parent track of the op's stream track (in a merged trace, one per input's GPU).
CREATE PERFETTO TABLE xpu_rank_op AS
WITH op AS (
  SELECT g.id, g.ts, g.ts + g.dur AS end_ts, g.category,
         t.parent_id AS device_track_id, th.upid AS launch_upid
  FROM xpu_gpu_op g
  JOIN track t ON g.track_id = t.id
  LEFT JOIN slice a ON a.id = g.api_id
  LEFT JOIN thread_track tt ON tt.id = a.track_id
  LEFT JOIN thread th ON th.utid = tt.utid
  WHERE g.category IN ('kernel', 'memcpy', 'memset') AND g.dur > 0
),
owner AS (
  SELECT device_track_id, launch_upid AS owner_upid
  FROM (
    SELECT device_track_id, launch_upid, row_number() OVER (
             PARTITION BY device_track_id ORDER BY count(*) DESC, launch_upid) AS r
    FROM op WHERE launch_upid IS NOT NULL
    GROUP BY device_track_id, launch_upid)
  WHERE r = 1
)
SELECT op.id, op.ts, op.end_ts, op.device_track_id,
       coalesce(op.launch_upid, owner.owner_upid) AS upid,
       CASE WHEN op.category != 'kernel' THEN 'copy'
            WHEN op.id IN (SELECT id FROM xpu_nccl_kernel) THEN 'comm'
            ELSE 'compute' END AS kind
FROM op LEFT JOIN owner USING (device_track_id);

-- Intervals merged into islands (overlaps count once): per (rank, device) all ops
-- ('busy'), NCCL kernels ('comm') and other kernels ('compute'); per device the compute
-- kernels of any rank ('device_compute', rank NULL): what can hide a rank's NCCL time.
CREATE PERFETTO TABLE xpu_rank_island AS
WITH keyed AS (
  SELECT upid, device_track_id, 'busy' AS part, ts, end_ts FROM xpu_rank_op
  UNION ALL
  SELECT upid, device_track_id, kind, ts, end_ts FROM xpu_rank_op WHERE kind != 'copy'
  UNION ALL
  SELECT NULL, device_track_id, 'device_compute', ts, end_ts FROM xpu_rank_op
  WHERE kind = 'compute'
),
reach AS (
  SELECT *, max(end_ts) OVER (
           PARTITION BY upid, device_track_id, part ORDER BY ts, end_ts
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM keyed
),
islands AS (
  SELECT *, sum(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END) OVER (
           PARTITION BY upid, device_track_id, part ORDER BY ts, end_ts
           ROWS UNBOUNDED PRECEDING) AS island
  FROM reach
)
SELECT upid, device_track_id, part, min(ts) AS ts, max(end_ts) AS end_ts
FROM islands
GROUP BY upid, device_track_id, part, island;

-- Exposed communication: the time a rank's NCCL islands cover and no compute island of the
-- same device does.  A sweep over both sets' edges: between two edges, `comm` and
-- `compute` say which set covers the time (islands of one set never overlap, so 0 or 1).
CREATE PERFETTO TABLE xpu_rank_exposed AS
WITH comm AS (
  SELECT upid, device_track_id, ts, end_ts FROM xpu_rank_island WHERE part = 'comm'
),
edges AS (
  SELECT upid, device_track_id, ts AS t, 1 AS d_comm, 0 AS d_compute FROM comm
  UNION ALL
  SELECT upid, device_track_id, end_ts, -1, 0 FROM comm
  UNION ALL
  SELECT r.upid, k.device_track_id, k.ts, 0, 1
  FROM xpu_rank_island k JOIN (SELECT DISTINCT upid, device_track_id FROM comm) r
    USING (device_track_id)
  WHERE k.part = 'device_compute'
  UNION ALL
  SELECT r.upid, k.device_track_id, k.end_ts, 0, -1
  FROM xpu_rank_island k JOIN (SELECT DISTINCT upid, device_track_id FROM comm) r
    USING (device_track_id)
  WHERE k.part = 'device_compute'
),
swept AS (
  -- Edges at one time: only the last row of the group has the state after all of them
  -- and the next time; the others span 0 ns.
  SELECT upid, device_track_id, t,
         sum(d_comm) OVER w AS in_comm, sum(d_compute) OVER w AS in_compute,
         lead(t) OVER w AS next_t
  FROM edges
  WINDOW w AS (PARTITION BY upid, device_track_id ORDER BY t, d_comm, d_compute
               ROWS UNBOUNDED PRECEDING)
)
SELECT upid, device_track_id,
       sum(CASE WHEN in_comm > 0 AND in_compute = 0 THEN next_t - t ELSE 0 END) AS exposed_ns
FROM swept
WHERE next_t IS NOT NULL
GROUP BY upid, device_track_id;

-- Step slices ($steps: ProfilerStep#* by default, or NVTX ranges by name) on the rank's
-- threads.
CREATE PERFETTO TABLE xpu_rank_step AS
SELECT th.upid, count(*) AS steps, sum(s.dur) AS step_total_ns, max(s.dur) AS step_max_ns
FROM xpu_thread_slice s JOIN thread th USING (utid)
WHERE s.name GLOB $steps AND s.dur > 0
GROUP BY th.upid;

-- Collective arrival: the ranks issue their collectives in one order, so the k-th NCCL
-- kernel of each rank is one collective; a rank whose kernel starts after the others' is
-- the one they waited for (their kernels ran, waiting, until it arrived).  late_ns: how
-- long after the first rank's its collectives start, on average; last: how often it
-- started last.  Only collectives every rank has (k up to the fewest of any rank).
CREATE PERFETTO TABLE xpu_rank_collective AS
SELECT upid, ts, end_ts - ts AS dur, row_number() OVER (PARTITION BY upid ORDER BY ts, id) AS k
FROM xpu_rank_op WHERE kind = 'comm' AND upid IS NOT NULL;

CREATE PERFETTO TABLE xpu_rank_arrival AS
WITH ranks AS (SELECT count(DISTINCT upid) AS n, min(k_max) AS k_common FROM (
  SELECT upid, max(k) AS k_max FROM xpu_rank_collective GROUP BY upid)),
per_k AS (
  SELECT k, min(ts) AS first_ts, max(ts) AS last_ts FROM xpu_rank_collective
  WHERE k <= (SELECT k_common FROM ranks) GROUP BY k
)
SELECT c.upid, avg(c.ts - p.first_ts) AS late_ns,
       sum(CASE WHEN c.ts = p.last_ts AND p.last_ts > p.first_ts THEN 1 ELSE 0 END) AS last_n,
       count(*) AS collectives
FROM xpu_rank_collective c JOIN per_k p USING (k)
WHERE (SELECT n FROM ranks) >= 2
GROUP BY c.upid;

CREATE PERFETTO TABLE xpu_rank_gpu AS
SELECT i.upid,
       count(DISTINCT i.device_track_id) AS devices,
       sum(CASE WHEN i.part = 'busy' THEN i.end_ts - i.ts ELSE 0 END) AS gpu_busy_ns,
       sum(CASE WHEN i.part = 'compute' THEN i.end_ts - i.ts ELSE 0 END) AS compute_ns,
       sum(CASE WHEN i.part = 'comm' THEN i.end_ts - i.ts ELSE 0 END) AS comm_ns,
       -- A rank's devices, by name (for a rank that launched nothing: which GPU).
       group_concat(DISTINCT d.name) AS device_names
FROM xpu_rank_island i
LEFT JOIN track d ON d.id = i.device_track_id
WHERE i.part IN ('busy', 'compute', 'comm')
GROUP BY i.upid;

-- The table, a row per rank: the script's last statement selects it (ranks.py).
CREATE PERFETTO VIEW xpu_rank AS
SELECT p.rank,
       coalesce(p.host, '') AS host,
       p.pid,
       coalesce(p.name, g.device_names) AS process,
       coalesce(g.devices, 0) AS devices,
       coalesce(g.gpu_busy_ns, 0) AS gpu_busy_ns,
       100.0 * coalesce(g.gpu_busy_ns, 0) / (SELECT dur FROM xpu_report_window)
         / max(coalesce(g.devices, 0), 1) AS gpu_busy_pct,
       coalesce(g.compute_ns, 0) AS compute_ns,
       coalesce(g.comm_ns, 0) AS comm_ns,
       (SELECT count(*) FROM xpu_rank_op o WHERE o.upid IS u.upid AND o.kind = 'comm')
         AS comm_kernels,
       coalesce((SELECT sum(exposed_ns) FROM xpu_rank_exposed e WHERE e.upid IS u.upid), 0)
         AS exposed_comm_ns,
       CASE WHEN coalesce(g.comm_ns, 0) > 0 THEN
         100.0 * coalesce((SELECT sum(exposed_ns) FROM xpu_rank_exposed e
                           WHERE e.upid IS u.upid), 0) / g.comm_ns END AS exposed_pct,
       coalesce(s.steps, 0) AS steps,
       s.step_total_ns / s.steps AS step_mean_ns,
       s.step_max_ns,
       CAST(a.late_ns AS INT) AS late_ns,
       a.last_n AS arrived_last,
       a.collectives,
       -- Each collective's in-kernel time, in order: what ranks of separate traces (clocks
       -- apart) are compared by (ranks.arrival_across_traces); dropped from the output.
       (SELECT group_concat(dur, ',') FROM (
          SELECT dur FROM xpu_rank_collective c WHERE c.upid IS u.upid ORDER BY k))
         AS collective_ns,
       u.upid
FROM (SELECT upid FROM xpu_rank_gpu UNION SELECT upid FROM xpu_rank_step) u
LEFT JOIN xpu_rank_gpu g ON g.upid IS u.upid
LEFT JOIN xpu_rank_step s ON s.upid IS u.upid
LEFT JOIN xpu_rank_arrival a ON a.upid IS u.upid
LEFT JOIN xpu_process p ON p.upid = u.upid
ORDER BY p.rank IS NULL, p.rank, host, p.pid, process;
