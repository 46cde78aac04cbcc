-- Every GPU idle gap inside the analysed regions, per device (no kernel, copy or set on any
-- stream of it), and what the CPU did meanwhile.  Needs span.sql.  {period}: the CPU
-- sampling period in ns (0: the trace has no timer samples).
--
-- A gap ends when its next op starts.  The thread that launched that op (its API call)
-- explains the gap:
--   sync          the thread sat in a sync API or a blocking copy when the GPU ran dry: it
--                 waited for the GPU, so nothing was queued behind the work that ended;
--   data_loading  the thread ran input-pipeline code (torch.utils.data, a dataset's
--                 __getitem__, image decoding) before it launched the next op;
--   host_compute  the thread ran other code before it launched (Python between launches,
--                 framework overhead);
--   launch        the launch path: the part of the gap after the API call began (the call
--                 itself and the GPU's start latency), and a host part shorter than
--                 {launch_host_ns} ns (the framework's per-op work between two launches);
--   other         no API call behind the next op, or nothing seen on the thread.
-- Timer samples of the thread split the host part (gap start -> API call): a sample covers
-- the sampling period before it, and counts for the part of the host part it covers.  Host
-- time no sample covers (the thread off-CPU, or between samples) takes the class of the
-- thread's last sample before the API call, if it is at most {stale_ns} older than the gap.

-- Gaps between the device's busy islands, clipped to the regions; next_op_id: the op whose
-- start ends the gap (unset where a region's end clips the gap).  _xpu_op_opening
-- (busy.py): the ops that start after every earlier op of their device ended, prev_end
-- the furthest end before.
CREATE PERFETTO TABLE _xpu_gap_raw AS
SELECT g.device_track_id, max(g.prev_end, r.ts) AS ts, min(g.ts, r.end_ts) AS end_ts,
       CASE WHEN g.ts <= r.end_ts THEN g.id END AS next_op_id,
       CASE WHEN g.ts <= r.end_ts THEN o.api_id END AS api_id,
       CASE WHEN g.ts <= r.end_ts THEN o.name END AS next_op,
       CASE WHEN g.ts <= r.end_ts THEN o.api_name END AS api_name,
       CASE WHEN g.ts <= r.end_ts THEN o.api_ts END AS api_ts,
       CASE WHEN g.ts <= r.end_ts THEN o.utid END AS utid
FROM _xpu_op_opening g
JOIN xpu_analysis_region r ON g.prev_end < r.end_ts AND g.ts > r.ts
JOIN xpu_analysis_op o ON o.id = g.id
WHERE g.ts > g.prev_end;

-- The gaps with their next op and its launching call; ids in (thread, time) order, which
-- the lookups below rely on.  host_end: where the host part ends (the API call's start,
-- clipped to the gap).
CREATE PERFETTO TABLE _xpu_gap AS
SELECT row_number() OVER (ORDER BY g.utid, g.ts, g.device_track_id) AS id,
       g.ts, g.end_ts - g.ts AS dur, g.end_ts, g.device_track_id, g.next_op_id, g.next_op,
       g.api_id, g.api_name, g.api_ts, g.utid,
       CASE WHEN g.api_ts IS NULL THEN g.ts ELSE max(g.ts, min(g.api_ts, g.end_ts)) END
         AS host_end
FROM _xpu_gap_raw g;
CREATE PERFETTO INDEX _xpu_gap_id ON _xpu_gap(id);

-- Calls that block the host until the GPU is done: syncs and copies (a copy to or from
-- pageable memory, or a synchronous cudaMemcpy, returns only when the copy ran).
-- Each name pattern is its own scan: trace_processor filters the slices by one GLOB itself
-- (a few ms over 1M slices), where GLOBs joined by OR are SQLite's, row by row (0.15-0.5 s).
CREATE PERFETTO TABLE _xpu_block_call AS
WITH named AS (
  SELECT id FROM slice WHERE name GLOB '*ynchronize*'
  UNION SELECT id FROM slice WHERE name GLOB 'cudaMemcpy*'
  UNION SELECT id FROM slice WHERE name GLOB 'cuMemcpy*'
  UNION SELECT id FROM slice WHERE name GLOB 'cudaStreamWaitEvent'
  UNION SELECT id FROM slice WHERE name GLOB 'cudaEventQuery'
)
SELECT row_number() OVER (ORDER BY s.utid, s.ts, s.id) AS seq, s.id, s.utid, s.ts,
       s.ts + s.dur AS end_ts, s.name
FROM named n
JOIN xpu_thread_slice s ON s.id = n.id
WHERE s.category = 'cuda_api'
  AND s.utid IN (SELECT utid FROM _xpu_gap);
CREATE PERFETTO INDEX _xpu_block_call_seq ON _xpu_block_call(seq);

-- Timer samples of the threads that launched a gap's next op, numbered in (thread, time)
-- order, so the samples of one gap are a range of numbers.
CREATE PERFETTO TABLE _xpu_gap_thread_sample AS
SELECT row_number() OVER (ORDER BY s.utid, s.ts, s.id) AS seq, s.id, s.utid, s.ts,
       s.callsite_id
FROM xpu_cpu_sample s
WHERE s.utid IN (SELECT utid FROM _xpu_gap);
CREATE PERFETTO INDEX _xpu_gap_thread_sample_seq ON _xpu_gap_thread_sample(seq);

-- For each gap, by one sort of gaps and blocking calls together: the last blocking call
-- begun by its start on the launching thread (gaps with a host part only: the call must have
-- been in flight while the GPU ran dry and the thread had not yet launched).
CREATE PERFETTO TABLE _xpu_gap_block_lookup AS
WITH ev AS (
  SELECT utid, ts, 1 AS ord, 0 AS is_block, id AS gap_id FROM _xpu_gap
  WHERE utid IS NOT NULL AND host_end > ts
  UNION ALL
  SELECT utid, ts, 0, 1, NULL FROM _xpu_block_call
),
counted AS (
  SELECT gap_id, sum(is_block) OVER (ORDER BY utid, ts, ord ROWS UNBOUNDED PRECEDING) AS seq
  FROM ev
)
SELECT gap_id, seq AS block_seq FROM counted WHERE gap_id IS NOT NULL AND seq > 0;

-- The same for the samples, for the gaps whose host part is long enough for its samples to
-- matter (a shorter one is the launch path, whatever ran): its samples' range (first after
-- its start .. last before the end of its host part + one period), and its last sample at
-- or before the API call.
CREATE PERFETTO TABLE _xpu_gap_lookup AS
WITH long_gap AS (
  SELECT id, utid, ts, host_end FROM _xpu_gap
  WHERE utid IS NOT NULL AND host_end - ts >= {launch_host_ns}
),
ev AS (
  SELECT utid, ts, 1 AS ord, 0 AS is_sample, id AS gap_id, 0 AS part FROM long_gap
  UNION ALL
  SELECT utid, host_end, 1, 0, id, 1 FROM long_gap
  UNION ALL
  SELECT utid, host_end + {period}, 1, 0, id, 2 FROM long_gap
  UNION ALL
  SELECT utid, ts, 0, 1, NULL, NULL FROM _xpu_gap_thread_sample
  WHERE EXISTS (SELECT 1 FROM long_gap)
),
counted AS (
  SELECT gap_id, part,
         sum(is_sample) OVER (ORDER BY utid, ts, ord ROWS UNBOUNDED PRECEDING) AS samples_before
  FROM ev
)
SELECT gap_id,
       max(CASE WHEN part = 0 THEN samples_before END) + 1 AS first_sample,
       max(CASE WHEN part = 1 THEN samples_before END) AS last_host_sample,
       max(CASE WHEN part = 2 THEN samples_before END) AS last_sample
FROM counted
WHERE gap_id IS NOT NULL
GROUP BY gap_id;
CREATE PERFETTO INDEX _xpu_gap_lookup_gap ON _xpu_gap_lookup(gap_id);

-- The blocking call in flight when the GPU ran dry (begun before the gap, ended after its
-- start, on the launching thread).
CREATE PERFETTO TABLE _xpu_gap_block AS
SELECT l.gap_id, b.id AS block_id, b.name AS block_name
FROM _xpu_gap_block_lookup l
JOIN _xpu_gap g ON g.id = l.gap_id
JOIN _xpu_block_call b ON b.seq = l.block_seq
WHERE b.utid = g.utid AND b.end_ts >= g.ts - 2000 AND g.host_end > g.ts;
CREATE PERFETTO INDEX _xpu_gap_block_gap ON _xpu_gap_block(gap_id);

-- Frames of the callsites that gap samples stand on, leaf first (up = 0).
CREATE PERFETTO TABLE _xpu_gap_callsite_frame AS
WITH RECURSIVE
used(callsite_id) AS (SELECT DISTINCT callsite_id FROM _xpu_gap_thread_sample),
chain(leaf, id, up) AS (
  SELECT callsite_id, callsite_id, 0 FROM used
  UNION ALL
  SELECT chain.leaf, c.parent_id, chain.up + 1
  FROM chain JOIN stack_profile_callsite c ON c.id = chain.id
  WHERE c.parent_id IS NOT NULL
)
SELECT chain.leaf AS callsite_id, chain.up, f.name, coalesce(m.name, '') AS module
FROM chain
JOIN stack_profile_callsite c ON c.id = chain.id
JOIN stack_profile_frame f ON f.id = c.frame_id
LEFT JOIN stack_profile_mapping m ON m.id = f.mapping;

-- Per callsite: does it run input-pipeline code, and where (the innermost frame of it).
CREATE PERFETTO TABLE _xpu_gap_callsite AS
WITH data AS (
  SELECT callsite_id FROM _xpu_gap_callsite_frame
  WHERE module GLOB '*/torch/utils/data/*' OR module GLOB '*/torchvision/datasets/*'
     OR module GLOB '*/torchvision/transforms/*' OR module GLOB '*/torchvision/io/*'
     OR module GLOB '*/PIL/*' OR module GLOB '*/datasets/*' OR module GLOB '*/webdataset/*'
     OR name GLOB '*__getitem__ (*' OR name GLOB '*__getitems__ (*'
     OR name GLOB '*collate* (*' OR name GLOB '*DataLoader*'
)
SELECT u.callsite_id, u.callsite_id IN (SELECT callsite_id FROM data) AS is_data
FROM (SELECT DISTINCT callsite_id FROM _xpu_gap_callsite_frame) u;

-- Each gap sample and the part of the gap's host part it covers.
CREATE PERFETTO TABLE _xpu_gap_sample AS
SELECT g.id AS gap_id, s.id AS sample_id, s.ts, s.callsite_id,
       coalesce(c.is_data, 0) AS is_data,
       max(0, min(s.ts, g.host_end) - max(s.ts - {period}, g.ts)) AS covered_ns
FROM _xpu_gap_lookup l
JOIN _xpu_gap g ON g.id = l.gap_id
JOIN _xpu_gap_thread_sample s ON s.seq BETWEEN l.first_sample AND l.last_sample
LEFT JOIN _xpu_gap_callsite c USING (callsite_id)
WHERE s.utid = g.utid AND g.host_end > g.ts;
CREATE PERFETTO INDEX _xpu_gap_sample_gap ON _xpu_gap_sample(gap_id);

-- Without timer samples on the thread (converted Kineto traces, --no-cpu), the CPU slices
-- stand in: input-pipeline slices (the DataLoader's __next__, a dataset's __getitem__) that
-- overlap the host part are data loading, the rest of it host work.
-- (One scan per name pattern, as for _xpu_block_call.)
CREATE PERFETTO TABLE _xpu_data_slice AS
WITH named AS (
  SELECT id FROM slice WHERE name GLOB '*DataLoader*'
  UNION SELECT id FROM slice WHERE name GLOB '*__getitem__*'
  UNION SELECT id FROM slice WHERE name GLOB '*collate*'
  UNION SELECT id FROM slice WHERE name GLOB '*_next_data*'
)
SELECT row_number() OVER (ORDER BY s.utid, s.ts, s.id) AS seq, s.utid, s.ts,
       s.ts + s.dur AS end_ts
FROM named n
JOIN xpu_thread_slice s ON s.id = n.id
WHERE s.category != 'cuda_api'
  AND s.utid IN (SELECT utid FROM _xpu_gap);
CREATE PERFETTO INDEX _xpu_data_slice_seq ON _xpu_data_slice(seq);

CREATE PERFETTO TABLE _xpu_gap_data_slice AS
WITH ev AS (
  SELECT utid, host_end AS ts, 1 AS ord, id AS gap_id, 0 AS is_slice FROM _xpu_gap
  WHERE utid IS NOT NULL AND host_end > ts
  UNION ALL
  SELECT utid, ts, 0, NULL, 1 FROM _xpu_data_slice
),
counted AS (
  SELECT gap_id, sum(is_slice) OVER (ORDER BY utid, ts, ord ROWS UNBOUNDED PRECEDING) AS seq
  FROM ev
)
SELECT c.gap_id, max(0, min(d.end_ts, g.host_end) - max(d.ts, g.ts)) AS data_ns
FROM counted c
JOIN _xpu_gap g ON g.id = c.gap_id
JOIN _xpu_data_slice d ON d.seq = c.seq
WHERE c.gap_id IS NOT NULL AND d.utid = g.utid;
CREATE PERFETTO INDEX _xpu_gap_data_slice_gap ON _xpu_gap_data_slice(gap_id);

-- The gaps, classified: ns per cause (they add up to dur), the class that explains most of
-- the gap, the launching thread and call, the next op, the blocking call where one.
CREATE PERFETTO TABLE xpu_gpu_gap AS
WITH cover AS (
  SELECT gap_id, sum(CASE WHEN is_data THEN covered_ns ELSE 0 END) AS data_ns,
         sum(CASE WHEN is_data THEN 0 ELSE covered_ns END) AS host_ns
  FROM _xpu_gap_sample GROUP BY gap_id
),
last_seen AS (
  -- What the thread was last seen doing before its API call.
  SELECT l.gap_id, coalesce(c.is_data, 0) AS is_data
  FROM _xpu_gap_lookup l
  JOIN _xpu_gap g ON g.id = l.gap_id
  JOIN _xpu_gap_thread_sample s ON s.seq = l.last_host_sample
  LEFT JOIN _xpu_gap_callsite c USING (callsite_id)
  WHERE s.utid = g.utid AND s.ts >= g.ts - {stale_ns}
),
-- Per gap: the host part split by cause.
split AS (
  SELECT g.*, b.block_id, b.block_name,
         CASE WHEN b.gap_id IS NOT NULL THEN g.host_end - g.ts ELSE 0 END AS sync_ns,
         CASE WHEN b.gap_id IS NOT NULL THEN 0
              ELSE min(coalesce(c.data_ns, 0), g.host_end - g.ts) END AS data_cov,
         CASE WHEN b.gap_id IS NOT NULL THEN 0
              ELSE min(coalesce(c.host_ns, 0),
                       g.host_end - g.ts - min(coalesce(c.data_ns, 0), g.host_end - g.ts))
         END AS host_cov,
         ls.is_data AS last_is_data,
         -- No sample of the thread at all: the CPU slices say what it did.
         CASE WHEN b.gap_id IS NULL AND c.gap_id IS NULL AND ls.gap_id IS NULL
                AND g.utid NOT IN (SELECT DISTINCT utid FROM _xpu_gap_thread_sample)
              THEN coalesce(ds.data_ns, 0) END AS slice_data_ns
  FROM _xpu_gap g
  LEFT JOIN _xpu_gap_block b ON b.gap_id = g.id
  LEFT JOIN cover c ON c.gap_id = g.id
  LEFT JOIN last_seen ls ON ls.gap_id = g.id
  LEFT JOIN _xpu_gap_data_slice ds ON ds.gap_id = g.id
),
parts AS (
  SELECT g.*,
         CASE WHEN g.slice_data_ns IS NOT NULL THEN min(g.slice_data_ns, g.host_end - g.ts)
              ELSE g.data_cov + CASE WHEN g.sync_ns = 0 AND g.last_is_data = 1
                                     THEN g.host_end - g.ts - g.data_cov - g.host_cov ELSE 0 END
         END AS data_ns,
         CASE WHEN g.slice_data_ns IS NOT NULL
              THEN g.host_end - g.ts - min(g.slice_data_ns, g.host_end - g.ts)
              ELSE g.host_cov + CASE WHEN g.sync_ns = 0 AND g.last_is_data = 0
                                     THEN g.host_end - g.ts - g.data_cov - g.host_cov ELSE 0 END
         END AS host_ns,
         CASE WHEN g.api_id IS NULL THEN 0 ELSE g.end_ts - g.host_end END AS launch_ns
  FROM split g
),
-- A short host part (under {launch_host_ns}) between two launches is the launch path
-- itself (the framework's per-op work), not code worth naming: it counts as launch.
short AS (
  SELECT id, ts, dur, end_ts, device_track_id, next_op_id, next_op, api_id, api_name, api_ts,
         utid, block_id, block_name, sync_ns,
         CASE WHEN sync_ns = 0 AND host_end - ts < {launch_host_ns} THEN 0 ELSE data_ns END
           AS data_ns,
         CASE WHEN sync_ns = 0 AND host_end - ts < {launch_host_ns} THEN 0 ELSE host_ns END
           AS host_ns,
         launch_ns + CASE WHEN sync_ns = 0 AND host_end - ts < {launch_host_ns}
                          THEN host_end - ts ELSE 0 END AS launch_ns
  -- OFFSET 0 keeps SQLite from flattening this into the queries below, which would copy
  -- the nested CASE expressions above into every reference to a column (1.3x slower).
  FROM parts LIMIT -1 OFFSET 0
),
classed AS (
  SELECT *, dur - sync_ns - data_ns - host_ns - launch_ns AS other_ns FROM short
)
SELECT c.id, c.ts, c.dur, c.device_track_id, t.name AS device, c.utid, c.api_id, c.api_name,
       c.api_ts, c.next_op_id, c.next_op,
       CASE max(c.sync_ns, c.data_ns, c.host_ns, c.launch_ns, c.other_ns)
         WHEN c.sync_ns THEN 'sync' WHEN c.data_ns THEN 'data_loading'
         WHEN c.host_ns THEN 'host_compute' WHEN c.launch_ns THEN 'launch'
         ELSE 'other' END AS class,
       c.sync_ns, c.data_ns, c.host_ns, c.launch_ns, c.other_ns, c.block_id, c.block_name
FROM classed c
JOIN track t ON t.id = c.device_track_id;
CREATE PERFETTO INDEX xpu_gpu_gap_id ON xpu_gpu_gap(id);
