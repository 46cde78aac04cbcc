-- GPU busy time: the union of the intervals in which a stream (or any stream of a device)
-- runs a kernel, copy or set.  Ops that overlap on one stream sit on sibling tracks of the
-- same name, and streams of one device overlap each other, so durations cannot just be
-- added: overlapping intervals are first merged ("islands").  Needs xpu_views.sql.

-- GPU ops that occupy the device; a stream is (device track, stream track name).
CREATE PERFETTO TABLE xpu_report_gpu_op AS
SELECT s.ts, s.dur, s.category, t.parent_id AS device_track_id, t.name AS stream
FROM xpu_gpu_op s
JOIN track t ON s.track_id = t.id
WHERE s.category IN ('kernel', 'memcpy', 'memset') AND s.dur > 0;

-- Busy islands per stream (stream set) and per device (stream NULL).
CREATE PERFETTO TABLE xpu_report_busy AS
WITH keyed AS (
  SELECT device_track_id, stream, ts, ts + dur AS end_ts FROM xpu_report_gpu_op
  UNION ALL
  SELECT device_track_id, NULL AS stream, ts, ts + dur AS end_ts FROM xpu_report_gpu_op
),
reach AS (
  -- The furthest end of any earlier op of the same stream: an op starting after it
  -- opens a new island.
  SELECT *, max(end_ts) OVER (
           PARTITION BY device_track_id, stream ORDER BY ts, end_ts
           ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
  FROM keyed
),
islands AS (
  SELECT *, sum(CASE WHEN prev_end IS NULL OR ts > prev_end THEN 1 ELSE 0 END) OVER (
           PARTITION BY device_track_id, stream ORDER BY ts, end_ts
           ROWS UNBOUNDED PRECEDING) AS island
  FROM reach
)
SELECT device_track_id, stream, min(ts) AS ts, max(end_ts) AS end_ts
FROM islands
GROUP BY device_track_id, stream, island;

-- The span utilisation is measured over: the analysis span (exporters/analysis/span.sql,
-- loaded first): the active span by default, the whole trace with --span all.
CREATE PERFETTO VIEW xpu_report_window AS
SELECT ts AS start_ts, end_ts, dur FROM xpu_analysis_span;
