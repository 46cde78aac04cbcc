-- CPU contexts (launch stack if recorded, else enclosing CPU slices) and API calls behind
-- the most GPU time.  Needs exporters/folded/stacks.sql.
SELECT c.root || coalesce(';' || c.context, '') AS stack,
       c.api_name AS api,
       sum(g.dur) AS gpu_ns,
       100.0 * sum(g.dur) / (SELECT sum(dur) FROM xpu_gpu_op
                             WHERE category IN ('kernel', 'memcpy', 'memset')) AS pct,
       count(*) AS ops
FROM xpu_gpu_op g
JOIN xpu_api_context c ON c.api_id = g.api_id
WHERE g.category IN ('kernel', 'memcpy', 'memset')
GROUP BY stack, api
ORDER BY gpu_ns DESC, stack
LIMIT {top};
