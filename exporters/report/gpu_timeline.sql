-- Busy time per time bin, per device (stream '*') and per stream: {bins} equal bins over
-- the trace.  An island inside one bin adds its length to that bin (one GROUP BY); only the
-- few islands that cross bin edges are clipped against each bin they touch.  The islands
-- inside a bin are summed per bin first (80k islands at 1M slices: 0.24 s for the query
-- as one GROUP BY over every island's part, 0.14 s so), then the parts of the crossing
-- ones added.  Needs gpu_busy.sql.
WITH
params AS MATERIALIZED (
  SELECT start_ts AS t0, max(1, (dur + {bins} - 1) / {bins}) AS w FROM xpu_report_window
),
iv AS (
  SELECT b.device_track_id, b.stream, b.ts, b.end_ts, p.t0, p.w,
         max(0, min({bins} - 1, (b.ts - p.t0) / p.w)) AS b0,
         max(0, min({bins} - 1, (b.end_ts - 1 - p.t0) / p.w)) AS b1
  FROM xpu_report_busy b, params p
),
bins(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM bins WHERE i + 1 < {bins}),
inside AS MATERIALIZED (
  SELECT device_track_id, stream, b0 AS bin, sum(end_ts - ts) AS busy
  FROM iv WHERE b0 = b1
  GROUP BY device_track_id, stream, b0
),
crossing AS MATERIALIZED (SELECT * FROM iv WHERE b0 < b1),
parts AS (
  SELECT device_track_id, stream, bin, busy FROM inside
  UNION ALL
  SELECT c.device_track_id, c.stream, bins.i AS bin,
         min(c.end_ts, c.t0 + (bins.i + 1) * c.w) - max(c.ts, c.t0 + bins.i * c.w)
  FROM crossing c JOIN bins ON bins.i BETWEEN c.b0 AND c.b1
)
SELECT coalesce(d.name, 'GPU ?') AS device, coalesce(s.stream, '*') AS stream,
       s.bin, s.busy_ns, (SELECT w FROM params) AS bin_ns, (SELECT t0 FROM params) AS t0
FROM (
  SELECT device_track_id, stream, bin, sum(busy) AS busy_ns
  FROM parts
  GROUP BY device_track_id, stream, bin
) s
LEFT JOIN track d ON d.id = s.device_track_id
ORDER BY device, s.stream IS NOT NULL, CAST(substr(s.stream, 8) AS INTEGER), s.stream, s.bin;
