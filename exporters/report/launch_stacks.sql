-- needs: folded.stacks
-- params: top int
-- returns: stack, modules, api, gpu_ns, pct, ops
-- CPU contexts (launch stack if recorded, else enclosing CPU slices) and API calls behind
-- the most GPU time.  Needs exporters/folded/stacks.sql.
-- GPU time is summed per API call first: joining every GPU op to the context table
-- directly makes SQLite nest the loops the slow way round (seconds for 5k kernels).  The
-- sums per call and op name of stacks.sql are that, a quarter of the rows of the ops.
WITH
per_api AS (
  SELECT api_id, sum(weight_ns) AS gpu_ns, sum(ops) AS ops
  FROM _xpu_folded_gpu_call
  WHERE api_id IS NOT NULL
  GROUP BY api_id
),
total AS (
  SELECT sum(weight_ns) AS ns FROM _xpu_folded_gpu_call
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
LIMIT $top;
