-- Busy vs idle per device (stream '*') and per stream over the whole trace.
-- Needs gpu_busy.sql.  The ops are counted per stream once, there (a count over all ops
-- for each stream and device took 0.15 s on 62k ops).
WITH ops AS MATERIALIZED (SELECT device_track_id, stream, ops AS n FROM _xpu_report_stream)
SELECT coalesce(d.name, 'GPU ?') AS device,
       coalesce(b.stream, '*') AS stream,
       b.busy_ns,
       w.dur - b.busy_ns AS idle_ns,
       100.0 * b.busy_ns / w.dur AS busy_pct,
       (SELECT coalesce(sum(o.n), 0) FROM ops o
        WHERE o.device_track_id IS b.device_track_id
          AND (b.stream IS NULL OR o.stream = b.stream)) AS ops
FROM (
  SELECT device_track_id, stream, sum(end_ts - ts) AS busy_ns
  FROM xpu_report_busy
  GROUP BY device_track_id, stream
) b
LEFT JOIN track d ON d.id = b.device_track_id
JOIN xpu_report_window w
ORDER BY device, b.stream IS NOT NULL, busy_ns DESC;
