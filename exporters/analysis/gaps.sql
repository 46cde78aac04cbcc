-- needs: perfetto.engine.xpu_views, analysis.span
-- inputs: _xpu_op_opening
-- defines: _xpu_gap_raw, _xpu_gap, _xpu_block_call, _xpu_gap_thread_sample,
--   _xpu_gap_block_lookup, _xpu_gap_block, _xpu_gap_host, _xpu_gap_thread_wait,
--   _xpu_gap_wait_lookup, _xpu_gap_lookup, _xpu_gap_callsite_frame, _xpu_gap_callsite,
--   _xpu_gap_launch_line, _xpu_gap_launch_callsite, _xpu_loader_worker,
--   _xpu_dataloader_process, _xpu_gap_wait, _xpu_gap_sample, _xpu_data_slice,
--   _xpu_gap_data_slice, xpu_gpu_gap
-- params: period int, launch_host_ns int, short_ns int, loop_share float, stale_ns int
-- Every GPU idle gap inside the analysed regions, per device (no kernel, copy or set on any
-- stream of it), and what the CPU did meanwhile.  Needs span.sql.  $period: the CPU
-- sampling period in ns (0: the trace has no timer samples).
--
-- A gap ends when its next op starts.  The thread that launched that op (its API call)
-- explains the gap, split along that thread's time into parts that add up to the gap:
--   sync          still inside the sync API or blocking copy that emptied the queue (in
--                 flight when the GPU ran dry), until it returned;
--   then, from there to the API call (the host part after the sync), in this order:
--   wait          blocked in a call (xpu_wait: poll, futex, read...) other than the input
--                 pipeline's;
--   data_loading  blocked waiting for a DataLoader batch (a wait whose stack is in
--                 torch.utils.data, or of a process with DataLoader worker children), or
--                 running input-pipeline code (torch.utils.data, a dataset's __getitem__,
--                 image decoding);
--   launch        running the launching of the model's own GPU work (launch_host_ns: the
--                 samples whose stack holds a Python line that launches GPU work on the
--                 thread, see _xpu_gap_launch_callsite), the launch path (the part after
--                 the API call began: the call itself and the GPU's start latency), and a
--                 host part shorter than $launch_host_ns ns (the framework's per-op work);
--   host_compute  running other code (preprocessing, logging: work that launches nothing);
--   other         no API call behind the next op, or host time nothing covers: neither a
--                 wait nor a sample (its share is shown, never given to a guess), except
--                 in a host part shorter than $short_ns ns, too short for the samples to
--                 say, where it takes the class of the thread's last sample.
-- Timer samples of the thread split the host part: a sample covers the sampling period
-- before it, and counts for the part of the host part it covers outside waits.

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
-- Each name pattern is its own scan: trace_processor filters the slices by one GLOB itself,
-- where GLOBs joined by OR are SQLite's, row by row.
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

-- The blocking call in flight when the GPU ran dry (begun before the gap, ended after its
-- start, on the launching thread); after_ts: where it returned (clipped to the host part),
-- the start of the host part after the sync.
-- copy_id: the copy whose result the call waited for: the call itself where it is a copy,
-- else a copy the thread made just before it (`.cpu()`, `.item()`: an async copy, then a
-- stream sync).
CREATE PERFETTO TABLE _xpu_gap_block AS
SELECT l.gap_id, b.id AS block_id, b.name AS block_name, b.end_ts AS block_end,
       max(g.ts, min(b.end_ts, g.host_end)) AS after_ts,
       CASE WHEN b.name GLOB '*emcpy*' THEN b.id
            WHEN p.utid = b.utid AND p.name GLOB '*emcpy*' AND p.end_ts >= b.ts - 100000
            THEN p.id END AS copy_id
FROM _xpu_gap_block_lookup l
JOIN _xpu_gap g ON g.id = l.gap_id
JOIN _xpu_block_call b ON b.seq = l.block_seq
LEFT JOIN _xpu_block_call p ON p.seq = l.block_seq - 1
WHERE b.utid = g.utid AND b.end_ts >= g.ts - 2000 AND g.host_end > g.ts;
CREATE PERFETTO INDEX _xpu_gap_block_gap ON _xpu_gap_block(gap_id);

-- The host part after the sync of each gap whose after part is long enough to be more than
-- the launch path (a shorter one is the launch path, whatever ran).
CREATE PERFETTO TABLE _xpu_gap_host AS
SELECT g.id, g.utid, coalesce(b.after_ts, g.ts) AS after_ts, g.host_end
FROM _xpu_gap g LEFT JOIN _xpu_gap_block b ON b.gap_id = g.id
WHERE g.utid IS NOT NULL AND g.host_end - coalesce(b.after_ts, g.ts) >= $launch_host_ns;
CREATE PERFETTO INDEX _xpu_gap_host_id ON _xpu_gap_host(id);

-- The launching threads' waits (xpu_wait: blocking calls over the recorder's threshold),
-- numbered in (thread, time) order like the samples.
CREATE PERFETTO TABLE _xpu_gap_thread_wait AS
SELECT row_number() OVER (ORDER BY w.utid, w.ts, w.id) AS seq, w.id, w.utid, w.ts,
       w.ts + w.dur AS end_ts, w.call, w.callsite_id
FROM xpu_wait w
WHERE w.dur > 0 AND w.utid IN (SELECT utid FROM _xpu_gap_host);
CREATE PERFETTO INDEX _xpu_gap_thread_wait_seq ON _xpu_gap_thread_wait(seq);

-- Per gap, the range of its thread's waits that can overlap its host part after the sync:
-- from the last begun by after_ts to the last begun before host_end (a thread's waits do
-- not overlap one another).
CREATE PERFETTO TABLE _xpu_gap_wait_lookup AS
WITH ev AS (
  SELECT utid, after_ts AS ts, 2 AS ord, 0 AS is_wait, id AS gap_id, 0 AS part
  FROM _xpu_gap_host
  UNION ALL
  SELECT utid, host_end, 0, 0, id, 1 FROM _xpu_gap_host
  UNION ALL
  SELECT utid, ts, 1, 1, NULL, NULL FROM _xpu_gap_thread_wait
),
counted AS (
  SELECT gap_id, part,
         sum(is_wait) OVER (ORDER BY utid, ts, ord ROWS UNBOUNDED PRECEDING) AS waits_before
  FROM ev
)
SELECT gap_id,
       max(1, max(CASE WHEN part = 0 THEN waits_before END)) AS first_wait,
       max(CASE WHEN part = 1 THEN waits_before END) AS last_wait
FROM counted
WHERE gap_id IS NOT NULL AND EXISTS (SELECT 1 FROM _xpu_gap_thread_wait)
GROUP BY gap_id;

-- The same for the samples: each gap's range (first after its start .. last before the end
-- of its host part + one period), and its last sample at or before the API call.
CREATE PERFETTO TABLE _xpu_gap_lookup AS
WITH ev AS (
  SELECT utid, after_ts AS ts, 1 AS ord, 0 AS is_sample, id AS gap_id, 0 AS part
  FROM _xpu_gap_host
  UNION ALL
  SELECT utid, host_end, 1, 0, id, 1 FROM _xpu_gap_host
  UNION ALL
  SELECT utid, host_end + $period, 1, 0, id, 2 FROM _xpu_gap_host
  UNION ALL
  SELECT utid, ts, 0, 1, NULL, NULL FROM _xpu_gap_thread_sample
  WHERE EXISTS (SELECT 1 FROM _xpu_gap_host)
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

-- Frames of the callsites that gap samples and waits stand on, leaf first (up = 0).
CREATE PERFETTO TABLE _xpu_gap_callsite_frame AS
WITH RECURSIVE
used(callsite_id) AS (
  SELECT callsite_id FROM _xpu_gap_thread_sample
  UNION SELECT callsite_id FROM _xpu_gap_thread_wait WHERE callsite_id IS NOT NULL
),
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

-- The Python lines that launch GPU work on each thread whose samples explain a gap: the
-- Python frames (with their line) of its launch stacks, and the share of its launches
-- whose stack holds each.  A line on nearly every launch stack is the loop around the
-- work (`<module>`, `train()`, `model(x)`), not a line that launches.
CREATE PERFETTO TABLE _xpu_gap_launch_line AS
WITH RECURSIVE
calls AS (
  SELECT utid, callsite_id, count(*) AS n FROM xpu_launch_stack
  WHERE utid IN (SELECT utid FROM _xpu_gap_thread_sample) AND callsite_id IS NOT NULL
  GROUP BY utid, callsite_id
),
chain(leaf, id) AS (
  SELECT DISTINCT callsite_id, callsite_id FROM calls
  UNION ALL
  SELECT chain.leaf, c.parent_id
  FROM chain JOIN stack_profile_callsite c ON c.id = chain.id
  WHERE c.parent_id IS NOT NULL
),
named AS (
  SELECT DISTINCT chain.leaf, f.name
  FROM chain
  JOIN stack_profile_callsite c ON c.id = chain.id
  JOIN stack_profile_frame f ON f.id = c.frame_id
  LEFT JOIN stack_profile_mapping m ON m.id = f.mapping
  WHERE f.name GLOB '* (*.py:*)' OR m.name GLOB '*.py'
),
total AS (SELECT utid, sum(n) AS n FROM calls GROUP BY utid)
SELECT c.utid, x.name, 1.0 * sum(c.n) / t.n AS share
FROM calls c JOIN named x ON x.leaf = c.callsite_id JOIN total t USING (utid)
GROUP BY c.utid, x.name;

-- Per thread and callsite of its gap samples: is the host launching the model's own GPU
-- work there?  Yes where the sample's innermost Python line is one that launches on the
-- thread (the statement running is a launch: `y = a @ b`), or where any of its Python
-- lines launches on fewer than $loop_share of the thread's launches (it is inside a
-- module's forward, an optimizer step: code whose lines launch GPU work).
CREATE PERFETTO TABLE _xpu_gap_launch_callsite AS
WITH py AS (
  SELECT DISTINCT s.utid, f.callsite_id, f.up, f.name
  FROM (SELECT DISTINCT utid, callsite_id FROM _xpu_gap_thread_sample) s
  JOIN _xpu_gap_callsite_frame f USING (callsite_id)
  WHERE f.name GLOB '* (*.py:*)' OR f.module GLOB '*.py'
),
innermost AS (SELECT utid, callsite_id, min(up) AS up FROM py GROUP BY utid, callsite_id)
SELECT DISTINCT p.utid, p.callsite_id
FROM py p
JOIN _xpu_gap_launch_line l ON l.utid = p.utid AND l.name = p.name
LEFT JOIN innermost i ON i.utid = p.utid AND i.callsite_id = p.callsite_id AND i.up = p.up
WHERE l.share < $loop_share OR i.up IS NOT NULL;

-- The processes whose DataLoader workers are in the trace: the workers' parent where the
-- trace knows it, else (no process tree: record names the workers, not their parent) every
-- process when there are workers at all.
CREATE PERFETTO TABLE _xpu_loader_worker AS
SELECT DISTINCT p.upid, p.parent_upid
FROM process p
WHERE p.name GLOB 'DataLoader worker*'
   OR EXISTS (SELECT 1 FROM thread t WHERE t.upid = p.upid AND t.name GLOB 'DataLoader worker*');

CREATE PERFETTO TABLE _xpu_dataloader_process AS
SELECT parent_upid AS upid FROM _xpu_loader_worker WHERE parent_upid IS NOT NULL
UNION
SELECT p.upid FROM process p
WHERE EXISTS (SELECT 1 FROM _xpu_loader_worker)
  AND NOT EXISTS (SELECT 1 FROM _xpu_loader_worker WHERE parent_upid IS NOT NULL);

-- Each gap wait and the part of the gap's host part after the sync it covers; is_data: a
-- wait for the input pipeline (its stack in torch.utils.data or a dataset; without a stack,
-- a wait of a process with DataLoader workers: the main thread waiting for a batch).
CREATE PERFETTO TABLE _xpu_gap_wait AS
SELECT g.id AS gap_id, w.id AS wait_id, w.utid, w.ts, w.end_ts, w.call, w.callsite_id,
       CASE WHEN coalesce(c.is_data, 0) = 1
              OR (w.callsite_id IS NULL
                  AND t.upid IN (SELECT upid FROM _xpu_dataloader_process))
            THEN 1 ELSE 0 END AS is_data,
       max(0, min(w.end_ts, g.host_end) - max(w.ts, g.after_ts)) AS covered_ns,
       max(w.ts, g.after_ts) AS from_ts, min(w.end_ts, g.host_end) AS to_ts
FROM _xpu_gap_wait_lookup l
JOIN _xpu_gap_host g ON g.id = l.gap_id
JOIN _xpu_gap_thread_wait w ON w.seq BETWEEN l.first_wait AND l.last_wait
JOIN thread t ON t.utid = w.utid
LEFT JOIN _xpu_gap_callsite c ON c.callsite_id = w.callsite_id
WHERE w.utid = g.utid AND w.end_ts > g.after_ts AND w.ts < g.host_end;
CREATE PERFETTO INDEX _xpu_gap_wait_gap ON _xpu_gap_wait(gap_id);

-- Each gap sample and the part of the gap's host part after the sync it covers; kind: 'data'
-- (input-pipeline code), 'launch' (launching the model's GPU work), 'host' (other code).
CREATE PERFETTO TABLE _xpu_gap_sample AS
SELECT g.id AS gap_id, s.id AS sample_id, s.ts, s.callsite_id,
       coalesce(c.is_data, 0) AS is_data,
       CASE WHEN coalesce(c.is_data, 0) = 1 THEN 'data'
            WHEN lc.callsite_id IS NOT NULL THEN 'launch' ELSE 'host' END AS kind,
       max(0, min(s.ts, g.host_end) - max(s.ts - $period, g.after_ts)) AS covered_ns
FROM _xpu_gap_lookup l
JOIN _xpu_gap_host g ON g.id = l.gap_id
JOIN _xpu_gap_thread_sample s ON s.seq BETWEEN l.first_sample AND l.last_sample
LEFT JOIN _xpu_gap_callsite c USING (callsite_id)
LEFT JOIN _xpu_gap_launch_callsite lc ON lc.utid = s.utid AND lc.callsite_id = s.callsite_id
WHERE s.utid = g.utid;
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
WITH scover AS (
  SELECT gap_id,
         sum(CASE WHEN kind = 'data' THEN covered_ns ELSE 0 END) AS data_ns,
         sum(CASE WHEN kind = 'launch' THEN covered_ns ELSE 0 END) AS launch_ns,
         sum(CASE WHEN kind = 'host' THEN covered_ns ELSE 0 END) AS host_ns
  FROM _xpu_gap_sample GROUP BY gap_id
),
wcover AS (
  SELECT gap_id, sum(CASE WHEN is_data THEN covered_ns ELSE 0 END) AS data_ns,
         sum(CASE WHEN is_data THEN 0 ELSE covered_ns END) AS wait_ns
  FROM _xpu_gap_wait GROUP BY gap_id
),
last_seen AS (
  -- What the thread was last seen doing before its API call.
  SELECT l.gap_id,
         CASE WHEN coalesce(c.is_data, 0) = 1 THEN 'data'
              WHEN lc.callsite_id IS NOT NULL THEN 'launch' ELSE 'host' END AS kind
  FROM _xpu_gap_lookup l
  JOIN _xpu_gap g ON g.id = l.gap_id
  JOIN _xpu_gap_thread_sample s ON s.seq = l.last_host_sample
  LEFT JOIN _xpu_gap_callsite c USING (callsite_id)
  LEFT JOIN _xpu_gap_launch_callsite lc ON lc.utid = s.utid AND lc.callsite_id = s.callsite_id
  WHERE s.utid = g.utid AND s.ts >= g.ts - $stale_ns
),
-- Per gap: the host part after the sync (after_ns) split by cause, each part capped by
-- what is left of it: waits first (a blocked thread is not running its last sample's
-- code), then data, launching and other samples.
split AS (
  SELECT g.*, b.block_id, b.block_name, b.copy_id,
         coalesce(b.after_ts, g.ts) - g.ts AS sync_ns,
         g.host_end - coalesce(b.after_ts, g.ts) AS after_ns,
         h.id IS NOT NULL AS long_after,
         coalesce(w.wait_ns, 0) AS w_wait, coalesce(w.data_ns, 0) AS w_data,
         coalesce(c.data_ns, 0) AS s_data, coalesce(c.launch_ns, 0) AS s_launch,
         coalesce(c.host_ns, 0) AS s_host,
         ls.kind AS last_kind,
         -- No sample of any launching thread (a converted trace, --no-cpu): the CPU slices
         -- say what it did.  (A thread without samples in a sampled trace was off-CPU.)
         CASE WHEN c.gap_id IS NULL AND ls.gap_id IS NULL AND w.gap_id IS NULL
                AND NOT EXISTS (SELECT 1 FROM _xpu_gap_thread_sample)
              THEN coalesce(ds.data_ns, 0) END AS slice_data_ns,
         -- Without samples: the part of the host part inside the framework op that makes
         -- the next launch (the call's enclosing cpu_op) is that op launching the model's
         -- own work (an aten op's dispatch before its kernel launch), not other code.
         max(0, g.host_end - max(coalesce(b.after_ts, g.ts), coalesce(
           (SELECT p.ts FROM slice a JOIN slice p ON p.id = a.parent_id
            WHERE a.id = g.api_id AND p.category = 'cpu_op'), g.host_end))) AS op_ns
  FROM _xpu_gap g
  LEFT JOIN _xpu_gap_block b ON b.gap_id = g.id
  LEFT JOIN _xpu_gap_host h ON h.id = g.id
  LEFT JOIN scover c ON c.gap_id = g.id
  LEFT JOIN wcover w ON w.gap_id = g.id
  LEFT JOIN last_seen ls ON ls.gap_id = g.id
  LEFT JOIN _xpu_gap_data_slice ds ON ds.gap_id = g.id
),
capped AS (
  SELECT s.*, min(s.w_wait, s.after_ns) AS wait_ns FROM split s LIMIT -1 OFFSET 0
),
capped2 AS (
  SELECT s.*, min(s.w_data, s.after_ns - s.wait_ns) AS wdata_ns FROM capped s LIMIT -1 OFFSET 0
),
capped3 AS (
  SELECT s.*, min(s.s_data, s.after_ns - s.wait_ns - s.wdata_ns) AS sdata_ns
  FROM capped2 s LIMIT -1 OFFSET 0
),
capped4 AS (
  SELECT s.*, min(s.s_launch, s.after_ns - s.wait_ns - s.wdata_ns - s.sdata_ns) AS slaunch_ns
  FROM capped3 s LIMIT -1 OFFSET 0
),
capped5 AS (
  SELECT s.*,
         min(s.s_host, s.after_ns - s.wait_ns - s.wdata_ns - s.sdata_ns - s.slaunch_ns)
           AS shost_ns
  FROM capped4 s LIMIT -1 OFFSET 0
),
parts AS (
  SELECT g.*,
         g.after_ns - g.wait_ns - g.wdata_ns - g.sdata_ns - g.slaunch_ns - g.shost_ns AS rest_ns,
         -- Too short for the samples to say (shorter than $short_ns): the rest takes the
         -- class of the thread's last sample; a longer rest is other.
         g.host_end - g.ts < $short_ns AS short_host
  FROM capped5 g LIMIT -1 OFFSET 0
),
-- A short host part after the sync (under $launch_host_ns) is the launch path itself (the
-- framework's per-op work), not code worth naming: it counts as launch.
classed AS (
  SELECT id, ts, dur, end_ts, device_track_id, next_op_id, next_op, api_id, api_name, api_ts,
         utid, block_id, block_name, copy_id, sync_ns,
         CASE WHEN NOT long_after THEN 0
              WHEN slice_data_ns IS NOT NULL THEN min(slice_data_ns, after_ns) ELSE 0 END
         + CASE WHEN long_after AND slice_data_ns IS NULL
                THEN wdata_ns + sdata_ns
                     + CASE WHEN short_host AND last_kind = 'data' THEN rest_ns ELSE 0 END
                ELSE 0 END AS data_ns,
         CASE WHEN NOT long_after THEN 0
              WHEN slice_data_ns IS NOT NULL
                THEN after_ns - min(slice_data_ns, after_ns)
                     - min(op_ns, after_ns - min(slice_data_ns, after_ns))
              ELSE shost_ns + CASE WHEN short_host AND last_kind = 'host' THEN rest_ns ELSE 0 END
         END AS host_ns,
         CASE WHEN long_after AND slice_data_ns IS NULL THEN wait_ns ELSE 0 END AS wait_ns,
         CASE WHEN long_after AND slice_data_ns IS NULL THEN wdata_ns ELSE 0 END AS data_wait_ns,
         CASE WHEN NOT long_after THEN after_ns
              WHEN slice_data_ns IS NOT NULL
                THEN min(op_ns, after_ns - min(slice_data_ns, after_ns))
              ELSE slaunch_ns + CASE WHEN short_host AND last_kind = 'launch' THEN rest_ns ELSE 0 END
         END AS launch_host_ns,
         CASE WHEN api_id IS NULL THEN 0 ELSE end_ts - host_end END AS launch_call_ns
  FROM parts LIMIT -1 OFFSET 0
),
summed AS (
  SELECT *, launch_host_ns + launch_call_ns AS launch_ns,
         dur - sync_ns - data_ns - host_ns - wait_ns - launch_host_ns - launch_call_ns
           AS other_ns
  FROM classed
)
SELECT c.id, c.ts, c.dur, c.device_track_id, t.name AS device, c.utid, c.api_id, c.api_name,
       c.api_ts, c.next_op_id, c.next_op,
       CASE max(c.sync_ns, c.data_ns, c.host_ns, c.wait_ns, c.launch_ns, c.other_ns)
         WHEN c.sync_ns THEN 'sync' WHEN c.data_ns THEN 'data_loading'
         WHEN c.host_ns THEN 'host_compute' WHEN c.wait_ns THEN 'wait'
         WHEN c.launch_ns THEN 'launch' ELSE 'other' END AS class,
       c.sync_ns, c.data_ns, c.host_ns, c.wait_ns, c.launch_ns, c.other_ns,
       -- the parts of data_ns and launch_ns that are waits for a batch / host code
       c.data_wait_ns, c.launch_host_ns,
       c.block_id, c.block_name, c.copy_id
FROM summed c
JOIN track t ON t.id = c.device_track_id;
CREATE PERFETTO INDEX xpu_gpu_gap_id ON xpu_gpu_gap(id);
