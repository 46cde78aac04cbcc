-- GPU busy time: the union of the intervals in which a stream (or any stream of a device)
-- runs a kernel, copy or set.  Ops that overlap on one stream sit on sibling tracks of the
-- same name, and streams of one device overlap each other, so durations cannot just be
-- added: overlapping intervals are first merged ("islands").  Needs xpu_views.sql and the
-- analysis's span.sql.

-- GPU ops that occupy the device; a stream is (device track, stream track name): the
-- analysis's ops (span.sql: kernels, copies, sets of dur > 0) with their track (lane) and
-- depth on it, sorted the way the islands below walk them.
CREATE PERFETTO TABLE xpu_report_gpu_op AS
SELECT o.ts, o.dur, o.end_ts, o.category, o.device_track_id, o.stream, s.track_id, s.depth
FROM xpu_analysis_op o
JOIN slice s ON s.id = o.id
ORDER BY o.device_track_id, o.stream, o.ts, o.end_ts;

-- The streams whose ops can overlap: those on sibling lanes, or nested in another slice of
-- their lane.  trace_processor puts a slice that starts inside another of its track one
-- level deeper, so the ops of a stream of one lane, all at depth 0, never overlap: they
-- are their own islands (the sums below are the same whether touching ops are merged or
-- not), and only these streams need the running maximum (0.25 s for 62k ops at 1M slices).
-- _xpu_report_stream: every stream with its ops (gpu_streams.sql counts them here).
CREATE PERFETTO TABLE _xpu_report_stream AS
SELECT device_track_id, stream, count(*) AS ops,
       count(DISTINCT track_id) > 1 OR max(depth) > 0 AS lanes
FROM xpu_report_gpu_op
GROUP BY device_track_id, stream;

CREATE PERFETTO TABLE _xpu_report_lane_stream AS
SELECT device_track_id, stream FROM _xpu_report_stream WHERE lanes;

-- prev_end: the furthest end of the stream's earlier ops, from which span.sql's
-- _xpu_islands makes the islands.
CREATE PERFETTO TABLE _xpu_report_stream_reach AS
SELECT o.device_track_id, o.stream, o.ts, max(o.end_ts) OVER (
         PARTITION BY o.device_track_id, o.stream ORDER BY o.ts, o.end_ts
         ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
FROM xpu_report_gpu_op o
JOIN _xpu_report_lane_stream USING (device_track_id, stream);

-- Busy intervals per stream (stream set: islands, or the ops of a stream that cannot
-- overlap) and per device (stream NULL: the analysis's islands of all ops,
-- exporters/analysis/span.sql, the same ops).
CREATE PERFETTO TABLE xpu_report_busy AS
SELECT device_track_id, key AS stream, ts, end_ts
FROM _xpu_islands!(_xpu_report_stream_reach, stream, xpu_report_gpu_op)
UNION ALL
SELECT o.device_track_id, o.stream, o.ts, o.end_ts
FROM xpu_report_gpu_op o
WHERE (o.device_track_id, o.stream) NOT IN (
  SELECT device_track_id, stream FROM _xpu_report_lane_stream)
UNION ALL
SELECT device_track_id, NULL, ts, end_ts FROM xpu_busy_island_all WHERE kind = 'any';

-- The span utilisation is measured over: the analysis span (exporters/analysis/span.sql,
-- loaded first): the active span by default, the whole trace with --span all.
CREATE PERFETTO VIEW xpu_report_window AS
SELECT ts AS start_ts, end_ts, dur FROM xpu_analysis_span;
