-- needs: perfetto.engine.xpu_views
-- params: top int
-- returns: name, calls, total_ns, pct, mean_ns, max_ns, all_calls, all_ns
-- CUDA API calls by the CPU (wall) time spent in them on the calling threads.
SELECT name,
       count(*) AS calls,
       sum(dur) AS total_ns,
       100.0 * sum(dur) / sum(sum(dur)) OVER () AS pct,  -- of all calls: one pass, not two
       avg(dur) AS mean_ns,
       max(dur) AS max_ns,
       -- all calls, for the report's facts (the rows stop at $top names)
       sum(count(*)) OVER () AS all_calls,
       sum(sum(dur)) OVER () AS all_ns
FROM xpu_thread_slice
WHERE category = 'cuda_api'
GROUP BY name
ORDER BY total_ns DESC, name
LIMIT $top;
