-- Busy vs idle per device (stream '*') and per stream over the whole trace.
-- Needs gpu_busy.sql.
SELECT coalesce(d.name, 'GPU ?') AS device,
       coalesce(b.stream, '*') AS stream,
       sum(b.end_ts - b.ts) AS busy_ns,
       w.dur - sum(b.end_ts - b.ts) AS idle_ns,
       100.0 * sum(b.end_ts - b.ts) / w.dur AS busy_pct,
       (SELECT count(*) FROM xpu_report_gpu_op o
        WHERE o.device_track_id IS b.device_track_id
          AND (b.stream IS NULL OR o.stream = b.stream)) AS ops
FROM xpu_report_busy b
LEFT JOIN track d ON d.id = b.device_track_id
JOIN xpu_report_window w
GROUP BY b.device_track_id, b.stream
ORDER BY device, b.stream IS NOT NULL, busy_ns DESC;
