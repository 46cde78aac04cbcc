-- defines: xpu_window, xpu_scope_span, xpu_scope_thread, xpu_scope_window
-- params: window int
-- What the shared views (xpu_views.sql) look at: the whole trace ($window = 0), or the
-- $window-th capture window of each process.  Loaded before xpu_views.sql.

-- The capture windows `record` writes (category xpu_perf_window, see record's windows),
-- numbered 1, 2, ... in time order within each process: with --capture-range-end repeat
-- every rank of a job opens its own N-th window around the same steps.
CREATE PERFETTO TABLE xpu_window AS
SELECT id, pid, ts, end_ts, reason, end_reason,
       row_number() OVER (PARTITION BY pid ORDER BY ts, id) AS window_no
FROM (
  SELECT s.id, extract_arg(s.arg_set_id, 'debug.pid') AS pid, s.ts, s.ts + s.dur AS end_ts,
         extract_arg(s.arg_set_id, 'debug.reason') AS reason,
         extract_arg(s.arg_set_id, 'debug.end_reason') AS end_reason
  FROM slice s
  WHERE s.category = 'xpu_perf_window'
);

-- The spans in scope, per process (none for the whole trace).
CREATE PERFETTO TABLE xpu_scope_span AS
SELECT p.upid, w.ts, w.end_ts
FROM xpu_window w
JOIN process p ON p.pid = w.pid
WHERE w.window_no = $window;

-- The same spans per thread: the views' filters look threads up here.
CREATE PERFETTO TABLE xpu_scope_thread AS
SELECT t.utid, w.ts, w.end_ts
FROM xpu_scope_span w
JOIN thread t USING (upid);

-- Which window the views were loaded for (0: the whole trace).
CREATE PERFETTO TABLE xpu_scope_window AS SELECT $window AS window;
