-- needs: analysis.span
-- defines: xpu_launch, xpu_launch_kernel_stats, xpu_copy
-- Launch statistics: every GPU op with the API call that launched it.  Needs span.sql.
-- latency_ns: from the call's start to the op's start on the GPU; shorter_than_call: the
-- op ran for less time than its launch call took on the CPU (the CPU cannot keep up with
-- a stream of such ops).  A view: a copy of the ops as a table cost more than the
-- engine's filter at each of its few uses.
CREATE PERFETTO VIEW xpu_launch AS
SELECT id AS op_id, name, category, ts, dur, end_ts, device_track_id, stream, api_id,
       api_name, api_ts, api_dur, utid, ts - api_ts AS latency_ns,
       dur < api_dur AS shorter_than_call
FROM xpu_analysis_op
WHERE api_ts IS NOT NULL;

-- Per kernel name: launches, latency percentiles (nearest rank), ops shorter than their call.
CREATE PERFETTO TABLE xpu_launch_kernel_stats AS
WITH ranked AS (
  SELECT name, latency_ns, dur, shorter_than_call,
         row_number() OVER (PARTITION BY name ORDER BY latency_ns) AS r,
         count(*) OVER (PARTITION BY name) AS n
  FROM xpu_launch WHERE category = 'kernel'
)
SELECT name, n AS launches,
       max(CASE WHEN r = (n * 50 + 99) / 100 THEN latency_ns END) AS latency_p50_ns,
       max(CASE WHEN r = (n * 99 + 99) / 100 THEN latency_ns END) AS latency_p99_ns,
       max(latency_ns) AS latency_max_ns,
       sum(shorter_than_call) AS shorter_than_call,
       sum(dur) AS gpu_ns
FROM ranked GROUP BY name;

-- xpu_stream_queue (queue depth per stream) is made by stream_queue.py after this file.

-- Copies one by one: direction, host memory (pageable / pinned, from the recorded
-- `debug.host_memory`, else from Kineto's op name "Memcpy HtoD (Pageable -> Device)"),
-- bytes and bandwidth.
CREATE PERFETTO TABLE xpu_copy AS
WITH c AS (
  SELECT o.id, o.ts, o.dur, o.name, o.api_id, o.api_name, o.api_dur,
         coalesce(extract_arg(g.arg_set_id, 'debug.copy_kind'),
                  CASE WHEN o.name GLOB 'Memcpy *' THEN substr(o.name, 8, 4) END) AS direction,
         coalesce(extract_arg(g.arg_set_id, 'debug.host_memory'),
                  CASE WHEN o.name GLOB '*Pageable*' THEN 'pageable'
                       WHEN o.name GLOB '*Pinned*' THEN 'pinned' END) AS host_memory,
         coalesce(extract_arg(g.arg_set_id, 'debug.bytes'),
                  NULL) AS bytes
  FROM xpu_analysis_op o JOIN slice g ON g.id = o.id
  WHERE o.category = 'memcpy'
)
SELECT c.id, c.ts, c.dur, c.name, c.api_id, c.direction, c.host_memory, c.bytes,
       CASE WHEN c.bytes > 0 THEN c.bytes * 1.0 / c.dur END AS gb_per_s,
       c.api_name, c.api_dur  -- the launching call's, as span.sql joined it
FROM c;

-- xpu_kernel_overlap (time compute kernels overlap NCCL kernels, copies, sets per device)
-- is made by kernel_overlap.py after this file, from busy.py's islands.
