-- GPU busy time: the union of the intervals in which a stream (or any stream of a device)
-- runs a kernel, copy or set.  Ops that overlap on one stream sit on sibling tracks of the
-- same name, and streams of one device overlap each other, so durations cannot just be
-- added: overlapping intervals are first merged ("islands").  Needs xpu_views.sql and the
-- analysis's span.sql.

-- GPU ops that occupy the device; a stream is (device track, stream track name): the
-- analysis's ops (span.sql: kernels, copies, sets of dur > 0), sorted the way the islands
-- below walk them.  (Sorted first, the running maximum takes 0.1 s on 62k ops; over the
-- unsorted ops 0.3 s.)
CREATE PERFETTO TABLE xpu_report_gpu_op AS
SELECT ts, dur, end_ts, category, device_track_id, stream
FROM xpu_analysis_op
ORDER BY device_track_id, stream, ts, end_ts;

-- prev_end: the furthest end of the stream's earlier ops, from which span.sql's
-- _xpu_islands makes the islands.
CREATE PERFETTO TABLE _xpu_report_stream_reach AS
SELECT device_track_id, stream, ts, max(end_ts) OVER (
         PARTITION BY device_track_id, stream ORDER BY ts, end_ts
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
FROM xpu_report_gpu_op;

-- Busy islands per stream (stream set) and per device (stream NULL: the analysis's islands
-- of all ops, exporters/analysis/span.sql, the same ops).
CREATE PERFETTO TABLE xpu_report_busy AS
SELECT device_track_id, key AS stream, ts, end_ts
FROM _xpu_islands!(_xpu_report_stream_reach, stream, xpu_report_gpu_op)
UNION ALL
SELECT device_track_id, NULL, ts, end_ts FROM xpu_busy_island_all WHERE kind = 'any';

-- The span utilisation is measured over: the analysis span (exporters/analysis/span.sql,
-- loaded first): the active span by default, the whole trace with --span all.
CREATE PERFETTO VIEW xpu_report_window AS
SELECT ts AS start_ts, end_ts, dur FROM xpu_analysis_span;
