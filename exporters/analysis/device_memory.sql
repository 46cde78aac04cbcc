-- needs: analysis.gpu_metrics
-- defines: xpu_memory_peak, xpu_allocation
-- Device memory: the `device memory in use` counter track of each GPU (record's CUPTI
-- MEMORY2 records of the recorded processes' cudaMalloc/cuMemAlloc/cudaMallocAsync and
-- frees) and each allocation, from the args of its API call.  Needs: gpu_metrics.sql
-- (xpu_gpu_counter).

-- Each device's peak of memory in use (its first time at that value).
--   device_track_id, device: the GPU's track and name; device_no: its number (D of `GPU D`);
--   ts: when the peak was first reached; bytes: the peak.
CREATE PERFETTO TABLE xpu_memory_peak AS
WITH ranked AS (
  SELECT gc.device_track_id, gc.device, c.ts, c.value,
         ROW_NUMBER() OVER (PARTITION BY gc.track_id ORDER BY c.value DESC, c.ts) AS r
  FROM counter c JOIN xpu_gpu_counter gc USING (track_id)
  WHERE gc.metric = 'device memory in use'
)
SELECT device_track_id, device, CAST(substr(device, 5) AS INT) AS device_no, ts,
       CAST(value AS INT) AS bytes
FROM ranked WHERE r = 1;

-- Each allocation: its API call (id, ts, name, thread, process), device, address, size,
-- and when the call that released it started (NULL: never released in the trace).  A
-- release is the next memory call at the same address of the same process and device.
CREATE PERFETTO TABLE xpu_allocation AS
WITH op AS (
  SELECT s.id, s.ts, s.name, tt.utid, t.upid,
         extract_arg(s.arg_set_id, 'debug.memory_op') AS memory_op,
         extract_arg(s.arg_set_id, 'debug.bytes') AS bytes,
         extract_arg(s.arg_set_id, 'debug.address') AS address,
         extract_arg(s.arg_set_id, 'debug.device') AS device_no
  FROM slice s
  JOIN thread_track tt ON tt.id = s.track_id
  JOIN thread t USING (utid)
  WHERE s.category = 'cuda_api'
    AND s.arg_set_id IN (SELECT arg_set_id FROM args WHERE key = 'debug.memory_op')
),
paired AS (
  SELECT *,
         LEAD(memory_op) OVER (PARTITION BY upid, device_no, address ORDER BY ts) AS next_op,
         LEAD(ts) OVER (PARTITION BY upid, device_no, address ORDER BY ts) AS next_ts
  FROM op
)
SELECT id, ts, name, utid, upid, device_no, address, bytes,
       CASE WHEN next_op = 'free' THEN next_ts END AS free_ts
FROM paired
WHERE memory_op = 'alloc';
