-- CPU contexts (launch stack if recorded, else enclosing CPU slices) and API calls behind
-- the most GPU time.  Needs exporters/folded/stacks.sql.
-- GPU time is summed per API call first: joining every GPU op to the context table
-- directly makes SQLite nest the loops the slow way round (seconds for 5k kernels).
WITH
per_api AS (
  SELECT api_id, sum(dur) AS gpu_ns, count(*) AS ops
  FROM xpu_gpu_op
  WHERE category IN ('kernel', 'memcpy', 'memset') AND api_id IS NOT NULL
  GROUP BY api_id
),
total AS (
  SELECT sum(dur) AS ns FROM xpu_gpu_op WHERE category IN ('kernel', 'memcpy', 'memset')
)
SELECT c.root || coalesce(';' || c.context, '') AS stack,
       ';' || max(c.context_modules) AS modules,  -- '' for the root; NULL: enclosing slices
       c.api_name AS api,
       sum(p.gpu_ns) AS gpu_ns,
       100.0 * sum(p.gpu_ns) / (SELECT ns FROM total) AS pct,
       sum(p.ops) AS ops
FROM per_api p
JOIN xpu_api_context c ON c.api_id = p.api_id
GROUP BY stack, api
ORDER BY gpu_ns DESC, stack
LIMIT {top};
