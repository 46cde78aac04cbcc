-- Folded stacks, one row per distinct stack, weights in ns (GPU) or sample counts (CPU).
-- Needs the views of exporters/perfetto/xpu_views.sql.

-- Callsite -> 'root;...;leaf' of demangled frame names, and the same frames' modules
-- (mapping names: an ELF path, a Python frame's source file) in `modules`, so readers can
-- tell the interpreter's frames by their object (exporters/folded/frames.py).
CREATE PERFETTO TABLE xpu_callsite_path AS
WITH RECURSIVE
  used(callsite_id) AS (
    SELECT callsite_id FROM xpu_cpu_sample
    UNION SELECT callsite_id FROM xpu_launch_stack
  ),
  chain(leaf, id, parent_id, frame_id, depth) AS (
    SELECT c.id, c.id, c.parent_id, c.frame_id, c.depth
    FROM stack_profile_callsite c JOIN used u ON u.callsite_id = c.id
    UNION ALL
    SELECT chain.leaf, p.id, p.parent_id, p.frame_id, p.depth
    FROM chain JOIN stack_profile_callsite p ON p.id = chain.parent_id
  )
SELECT leaf AS callsite_id, group_concat(frame_name, ';') AS path,
       group_concat(module, ';') AS modules
FROM (
  SELECT chain.leaf, chain.depth,
         replace(coalesce(f.deobfuscated_name, f.name, '[unknown]'), ';', ':') AS frame_name,
         replace(coalesce(m.name, ''), ';', ':') AS module
  FROM chain JOIN stack_profile_frame f ON f.id = chain.frame_id
  LEFT JOIN stack_profile_mapping m ON m.id = f.mapping
  ORDER BY chain.leaf, chain.depth
)
GROUP BY leaf;

-- Root frame of every stack: the thread (or process) it ran on.
CREATE PERFETTO VIEW xpu_thread_root AS
SELECT t.utid,
       replace(coalesce(t.name, p.name, 'pid ' || p.pid, 'tid ' || t.tid), ';', ':') AS root
FROM thread t LEFT JOIN process p USING (upid);

-- CPU context of each API call: its launch stack when the trace has one, else the names
-- of the CPU slices enclosing it (python functions, aten ops) -- what Kineto traces give.
-- context_modules: the launch stack's modules (NULL for enclosing slices).
-- The API calls that launched something are joined by id: `api.id IN (SELECT ...)` on the
-- slice view made trace_processor scan the slices once per op (53 s for 84k ops on a
-- 1M-slice trace; the join takes 0.03 s).
CREATE PERFETTO TABLE xpu_api_context AS
SELECT api.id AS api_id, api.name AS api_name, r.root,
       coalesce(ls.path,
         (SELECT group_concat(n, ';') FROM (
            SELECT replace(a.name, ';', ':') AS n FROM ancestor_slice(api.id) a ORDER BY a.depth))
       ) AS context,
       ls.modules AS context_modules
FROM (SELECT DISTINCT api_id FROM xpu_gpu_op WHERE api_id IS NOT NULL) launched
JOIN xpu_thread_slice api ON api.id = launched.api_id
LEFT JOIN (
  SELECT ls.utid, ls.ts, cp.path, cp.modules
  FROM xpu_launch_stack ls JOIN xpu_callsite_path cp USING (callsite_id)
  GROUP BY ls.utid, ls.ts
) ls ON ls.utid = api.utid AND ls.ts = api.ts
JOIN xpu_thread_root r USING (utid)
ORDER BY api.id;

CREATE PERFETTO TABLE xpu_folded_gpu AS
SELECT
  coalesce(c.root || ';', '') || coalesce(c.context || ';', '')
    || coalesce(replace(c.api_name, ';', ':') || ';', '')
    || CASE g.category WHEN 'kernel' THEN '[GPU_Kernel]' WHEN 'memcpy' THEN '[GPU_Memcpy]'
                       ELSE '[GPU_Memset]' END
    || replace(g.name, ';', ':') AS stack,
  -- '' for the root, the API call and the GPU op; NULL where the context has no modules
  CASE WHEN c.context IS NULL THEN ';;' ELSE ';' || c.context_modules || ';;' END AS modules,
  sum(g.dur) AS weight_ns,
  count(*) AS ops
FROM xpu_gpu_op g
LEFT JOIN xpu_api_context c ON c.api_id = g.api_id
WHERE g.category IN ('kernel', 'memcpy', 'memset')
GROUP BY stack, modules;

CREATE PERFETTO TABLE xpu_folded_cpu AS
SELECT r.root || coalesce(';' || cp.path, '') AS stack,
       coalesce(';' || cp.modules, '') AS modules,  -- '' for the root
       count(*) AS samples
FROM xpu_cpu_sample s
JOIN xpu_thread_root r USING (utid)
LEFT JOIN xpu_callsite_path cp USING (callsite_id)
GROUP BY stack, modules;
