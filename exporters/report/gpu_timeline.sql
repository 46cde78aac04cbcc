-- Busy time per time bin, per device (stream '*') and per stream: {bins} equal bins over
-- the trace.  An island inside one bin adds its length to that bin (one GROUP BY); only the
-- few islands that cross bin edges are clipped against each bin they touch.
-- Needs gpu_busy.sql.
WITH
params AS (
  SELECT start_ts AS t0, max(1, (dur + {bins} - 1) / {bins}) AS w FROM xpu_report_window
),
iv AS (
  SELECT b.device_track_id, b.stream, b.ts, b.end_ts, p.t0, p.w,
         max(0, min({bins} - 1, (b.ts - p.t0) / p.w)) AS b0,
         max(0, min({bins} - 1, (b.end_ts - 1 - p.t0) / p.w)) AS b1
  FROM xpu_report_busy b, params p
),
bins(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM bins WHERE i + 1 < {bins}),
parts AS (
  SELECT device_track_id, stream, b0 AS bin, end_ts - ts AS busy FROM iv WHERE b0 = b1
  UNION ALL
  SELECT iv.device_track_id, iv.stream, bins.i AS bin,
         min(iv.end_ts, iv.t0 + (bins.i + 1) * iv.w) - max(iv.ts, iv.t0 + bins.i * iv.w)
  FROM iv JOIN bins ON bins.i BETWEEN iv.b0 AND iv.b1
  WHERE iv.b0 < iv.b1
)
SELECT coalesce(d.name, 'GPU ?') AS device, coalesce(parts.stream, '*') AS stream,
       parts.bin, sum(parts.busy) AS busy_ns, (SELECT w FROM params) AS bin_ns,
       (SELECT t0 FROM params) AS t0
FROM parts
LEFT JOIN track d ON d.id = parts.device_track_id
GROUP BY parts.device_track_id, parts.stream, parts.bin
ORDER BY device, parts.stream IS NOT NULL, CAST(substr(parts.stream, 8) AS INTEGER), parts.stream,
         parts.bin;
