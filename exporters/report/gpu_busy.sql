-- GPU busy time: the union of the intervals in which a stream (or any stream of a device)
-- runs a kernel, copy or set.  Ops that overlap on one stream sit on sibling tracks of the
-- same name, and streams of one device overlap each other, so durations cannot just be
-- added: overlapping intervals are first merged ("islands").  Needs xpu_views.sql and the
-- analysis's span.sql.

-- GPU ops that occupy the device; a stream is (device track, stream track name).
CREATE PERFETTO TABLE xpu_report_gpu_op AS
SELECT s.ts, s.dur, s.category, t.parent_id AS device_track_id, t.name AS stream
FROM xpu_gpu_op s
JOIN track t ON s.track_id = t.id
WHERE s.category IN ('kernel', 'memcpy', 'memset') AND s.dur > 0;

-- Busy islands per stream (stream set) and per device (stream NULL: the analysis's islands
-- of all ops, exporters/analysis/span.sql, the same ops).  prev_end: the furthest end of the
-- stream's earlier ops, from which span.sql's _xpu_islands makes the islands.
CREATE PERFETTO TABLE xpu_report_busy AS
WITH reach AS (
  SELECT device_track_id, stream, ts, max(ts + dur) OVER (
           PARTITION BY device_track_id, stream ORDER BY ts, ts + dur
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM xpu_report_gpu_op
)
SELECT device_track_id, key AS stream, ts, end_ts
FROM _xpu_islands!(
  reach, stream,
  (SELECT device_track_id, stream, ts + dur AS end_ts FROM xpu_report_gpu_op))
UNION ALL
SELECT device_track_id, NULL, ts, end_ts FROM xpu_busy_island_all WHERE kind = 'any';

-- The span utilisation is measured over: the analysis span (exporters/analysis/span.sql,
-- loaded first): the active span by default, the whole trace with --span all.
CREATE PERFETTO VIEW xpu_report_window AS
SELECT ts AS start_ts, end_ts, dur FROM xpu_analysis_span;
