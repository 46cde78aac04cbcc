-- needs: perfetto.engine.xpu_views
-- params: top int
-- returns: name, count, total_ns, pct, mean_ns, p50_ns, p99_ns, max_ns
-- Top GPU kernels by total time.  p50/p99 are nearest-rank percentiles (the value at rank
-- ceil(p/100 * n) of the sorted durations): trace_processor v52 has no percentile
-- function, and nearest-rank is always a duration that really occurred.
WITH ranked AS (
  SELECT name, dur,
         row_number() OVER (PARTITION BY name ORDER BY dur) AS rank,
         count(*) OVER (PARTITION BY name) AS n
  FROM xpu_gpu_op
  WHERE category = 'kernel'
)
SELECT name,
       count(*) AS count,
       sum(dur) AS total_ns,
       100.0 * sum(dur) / (SELECT sum(dur) FROM xpu_gpu_op WHERE category = 'kernel') AS pct,
       avg(dur) AS mean_ns,
       max(CASE WHEN rank = (n * 50 + 99) / 100 THEN dur END) AS p50_ns,
       max(CASE WHEN rank = (n * 99 + 99) / 100 THEN dur END) AS p99_ns,
       max(dur) AS max_ns
FROM ranked
GROUP BY name
ORDER BY total_ns DESC, name
LIMIT $top;
