-- xpu_wait (the blocked-time contract, issue 37): one blocking call on one thread over the
-- recorder's threshold, a slice of category 'wait' on the thread's track, its call in
-- `debug.call` and its stack at entry interned like a launch stack.  The recorder's views
-- (exporters/perfetto/engine/xpu_views.sql) define it where the trace can hold waits; this is the
-- same definition for the analysis where they do not (it is then empty on such a trace).
CREATE PERFETTO VIEW xpu_wait AS
SELECT s.id, s.ts, s.dur, s.utid,
       coalesce(extract_arg(s.arg_set_id, 'debug.call'),
                CASE WHEN s.name GLOB 'waiting in *' THEN substr(s.name, 12) ELSE s.name END)
         AS call,
       ls.callsite_id
FROM xpu_thread_slice s
LEFT JOIN xpu_launch_stack ls ON ls.utid = s.utid AND ls.ts = s.ts
WHERE s.category = 'wait';
