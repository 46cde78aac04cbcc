-- needs: perfetto.engine.scope
-- defines: xpu_stack_session, xpu_cpu_sample, xpu_launch_stack, xpu_launch_stack_frame,
--   xpu_thread_slice, xpu_wait, xpu_gpu_op, xpu_metadata, xpu_process, xpu_nccl_kernel
-- params: whole_trace bool, gpu_op_as relation
-- Views over an xpu-perf trace that every reader shares (folded, report, tests).
-- Runs on trace_processor v52 (embedded) and newer native shells.
-- The views see the part of the trace in scope (scope.sql, loaded first): the whole trace,
-- or one capture window of each process (`--window N`).

-- Which perf session holds CPU timer samples: the writer puts them on sequences whose perf
-- timebase is named 'cpu-clock'; trace_processor keeps the name on the session's counter
-- tracks.  (Traces written before launch stacks moved out of perf_sample have a second
-- timebase, 'xpu_perf.launch_stack'.)
CREATE PERFETTO VIEW xpu_stack_session AS
SELECT DISTINCT a.int_value AS perf_session_id, t.name AS timebase
FROM track t
JOIN args a ON a.arg_set_id = t.dimension_arg_set_id AND a.key = 'perf_session_id'
WHERE t.name IN ('cpu-clock', 'xpu_perf.launch_stack');

CREATE PERFETTO VIEW xpu_cpu_sample AS
SELECT ps.id, ps.ts, ps.utid, ps.cpu, ps.callsite_id
FROM perf_sample ps
JOIN xpu_stack_session s USING (perf_session_id)
WHERE s.timebase = 'cpu-clock' AND ($whole_trace OR EXISTS (
    SELECT 1 FROM xpu_scope_thread w WHERE w.utid = ps.utid AND ps.ts BETWEEN w.ts AND w.end_ts));

-- The launch stack of each API call: its thread, its exact time (the API slice's ts) and
-- its callsite.  Written as StreamingProfilePackets (exporters/perfetto/launch_stacks.py:
-- kept out of the UI's CPU flamegraph), whose table has microsecond times; the ns rest
-- travels in process_priority.  Older traces: perf samples of timebase
-- 'xpu_perf.launch_stack'.
-- Wait stacks share the table, their process_priority raised by 1000000 (launch_stacks.py's
-- WAIT_STACK_MARK).
CREATE PERFETTO VIEW xpu_launch_stack AS
SELECT ls.id, ls.ts, ls.utid, ls.callsite_id
FROM (
  SELECT cs.id, cs.ts + cs.process_priority AS ts, cs.utid, cs.callsite_id
  FROM cpu_profile_stack_sample cs
  WHERE cs.process_priority < 1000000
  UNION ALL
  SELECT ps.id, ps.ts, ps.utid, ps.callsite_id
  FROM perf_sample ps
  JOIN xpu_stack_session s USING (perf_session_id)
  WHERE s.timebase = 'xpu_perf.launch_stack'
) ls
WHERE $whole_trace OR EXISTS (
    SELECT 1 FROM xpu_scope_thread w WHERE w.utid = ls.utid AND ls.ts BETWEEN w.ts AND w.end_ts);

-- The frames of every launch stack, leaf first (up = 0 is the probed or launching function).
CREATE PERFETTO VIEW xpu_launch_stack_frame AS
WITH RECURSIVE chain(sample_id, callsite_id, up) AS (
  SELECT id, callsite_id, 0 FROM xpu_launch_stack
  UNION ALL
  SELECT chain.sample_id, c.parent_id, chain.up + 1
  FROM chain JOIN stack_profile_callsite c ON c.id = chain.callsite_id
  WHERE c.parent_id IS NOT NULL
)
SELECT chain.sample_id, chain.up, f.name, m.name AS module
FROM chain
JOIN stack_profile_callsite c ON c.id = chain.callsite_id
JOIN stack_profile_frame f ON f.id = c.frame_id
LEFT JOIN stack_profile_mapping m ON m.id = f.mapping;

-- Every slice on a thread, with its thread (lanes of one thread share the utid).
CREATE PERFETTO VIEW xpu_thread_slice AS
SELECT s.id, s.ts, s.dur, s.name, s.category, s.depth, s.arg_set_id, tt.utid
FROM slice s
JOIN thread_track tt ON s.track_id = tt.id
WHERE ($whole_trace OR EXISTS (
    SELECT 1 FROM xpu_scope_thread w WHERE w.utid = tt.utid AND s.ts BETWEEN w.ts AND w.end_ts));

-- Blocked time: each blocking call of a thread that lasted the recording's wait threshold
-- (record --wait-threshold), a slice `waiting in <call>` of category 'wait' on the thread,
-- with the libc call's name and the callsite of its stack at entry (NULL where none): a
-- StreamingProfilePacket sample of the thread at the slice's exact ts, marked by a
-- process_priority >= 1000000 (exporters/perfetto/launch_stacks.py).
CREATE PERFETTO VIEW xpu_wait AS
WITH wait_stack AS (
  SELECT cs.ts + cs.process_priority - 1000000 AS ts, cs.utid, cs.callsite_id
  FROM cpu_profile_stack_sample cs
  WHERE cs.process_priority >= 1000000
)
SELECT s.id, s.ts, s.dur, s.utid,
  (SELECT a.string_value FROM args a
   WHERE a.arg_set_id = s.arg_set_id AND a.key = 'debug.call') AS call,
  ws.callsite_id
FROM xpu_thread_slice s
LEFT JOIN wait_stack ws ON ws.utid = s.utid AND ws.ts = s.ts
WHERE s.category = 'wait';

-- GPU op -> the API call that caused it (through the flow written from the API slice).
-- In a window: the ops launched inside it, even those that run past its end; an op
-- without its API call, when it overlaps the window.
CREATE PERFETTO $gpu_op_as xpu_gpu_op AS
SELECT g.id, g.ts, g.dur, g.name, g.category, g.track_id, g.arg_set_id,
       f.slice_out AS api_id
FROM slice g
LEFT JOIN flow f ON f.slice_in = g.id
WHERE g.category IN ('kernel', 'memcpy', 'memset', 'sync')
  AND ($whole_trace
       OR f.slice_out IN (SELECT id FROM xpu_thread_slice)
       OR (f.slice_out IS NULL AND EXISTS (
             SELECT 1 FROM xpu_scope_span w WHERE g.ts < w.end_ts AND g.ts + g.dur > w.ts)));

-- The run's metadata and counters (key without the 'debug.' prefix).
CREATE PERFETTO VIEW xpu_metadata AS
SELECT substr(a.key, 7) AS key, a.int_value, a.string_value, a.real_value, a.display_value
FROM slice s
JOIN args a USING (arg_set_id)
WHERE s.category = 'xpu_perf_metadata';

-- Each process with its launcher identity (NULL where none): the writer puts rank,
-- local_rank and world_size in the process descriptor's labels as 'key=value'.
CREATE PERFETTO VIEW xpu_process AS
SELECT p.upid, p.pid, p.name,
  (SELECT CAST(substr(a.string_value, 6) AS INT) FROM args a
   WHERE a.arg_set_id = p.arg_set_id AND a.flat_key = 'chrome.process_label'
     AND a.string_value GLOB 'rank=*') AS rank,
  (SELECT CAST(substr(a.string_value, 12) AS INT) FROM args a
   WHERE a.arg_set_id = p.arg_set_id AND a.flat_key = 'chrome.process_label'
     AND a.string_value GLOB 'local_rank=*') AS local_rank,
  (SELECT CAST(substr(a.string_value, 12) AS INT) FROM args a
   WHERE a.arg_set_id = p.arg_set_id AND a.flat_key = 'chrome.process_label'
     AND a.string_value GLOB 'world_size=*') AS world_size,
  -- `merge` labels each process with its input's host; a trace of one node has the host
  -- in its metadata (record; convert where the Kineto trace names it).
  coalesce(
    (SELECT substr(a.string_value, 6) FROM args a
     WHERE a.arg_set_id = p.arg_set_id AND a.flat_key = 'chrome.process_label'
       AND a.string_value GLOB 'host=*'),
    (SELECT string_value FROM xpu_metadata WHERE key = 'host')) AS host
FROM process p
WHERE p.pid != 0;

-- NCCL kernels: the GPU side of collective communication (ncclDevKernel_*, ncclKernel_*);
-- every other kernel is computation.
CREATE PERFETTO VIEW xpu_nccl_kernel AS
SELECT * FROM xpu_gpu_op
WHERE category = 'kernel' AND (name LIKE 'nccl%' OR name LIKE 'void nccl%');
