-- needs: perfetto.engine.xpu_views
-- defines: xpu_callsite_path, _xpu_folded_gpu_call, _xpu_launched_id, _xpu_launched_api,
--   xpu_thread_root, _xpu_enclosing, _xpu_launch_stack_path, xpu_api_context, xpu_folded_gpu,
--   xpu_folded_cpu
-- Folded stacks, one row per distinct stack, weights in ns (GPU) or sample counts (CPU).
-- Needs the views of exporters/perfetto/engine/xpu_views.sql.

-- Callsite -> 'root;...;leaf' of demangled frame names, and the same frames' modules
-- (mapping names: an ELF path, a Python frame's source file) in `modules`, so readers can
-- tell the interpreter's frames by their object (exporters/folded/frames.py).
CREATE PERFETTO TABLE xpu_callsite_path AS
WITH RECURSIVE
  used(callsite_id) AS (
    SELECT callsite_id FROM xpu_cpu_sample
    UNION SELECT callsite_id FROM xpu_launch_stack
    UNION SELECT callsite_id FROM xpu_wait WHERE callsite_id IS NOT NULL
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

-- GPU time per launching call and op name first (integers and a name to group: far fewer
-- rows than ops), then per stack: cheaper than grouping every op by its whole stack text.
CREATE PERFETTO TABLE _xpu_folded_gpu_call AS
SELECT api_id, category, name, sum(dur) AS weight_ns, count(*) AS ops
FROM xpu_gpu_op
WHERE category IN ('kernel', 'memcpy', 'memset')
GROUP BY api_id, category, name;

-- The API calls that launched a kernel, copy or set (what the stacks and the report's
-- launch contexts weigh; not the sync ops': 22k of the 84k GPU ops of a 1M-slice trace),
-- with their thread and parent slice.  Built in steps, each a table: trace_processor plans
-- one statement over the slice and flow views badly (`api.id IN (SELECT ...)` scanned the
-- slices once per op; the distinct ids joined in the same statement were still slower than
-- the table of ids first, then the join by id).
CREATE PERFETTO TABLE _xpu_launched_id AS
SELECT DISTINCT api_id FROM _xpu_folded_gpu_call WHERE api_id IS NOT NULL ORDER BY api_id;

CREATE PERFETTO TABLE _xpu_launched_api AS
SELECT api.id, api.name, api.ts, api.utid, s.parent_id
FROM _xpu_launched_id l
JOIN xpu_thread_slice api ON api.id = l.api_id
JOIN slice s ON s.id = l.api_id
ORDER BY api.id;

-- Root frame of every stack: the thread it ran on, named as a person knows it
-- (docs/ARCHITECTURE.md, "Thread and process names"):
-- - a process's role is its name less the program in parentheses (`DataLoader worker 0
--   (python3)` -> `DataLoader worker 0`, `rank 1 (python3)` -> `rank 1`); its main thread
--   reads as the role; without one, `main` where one such process did anything, else
--   `PROGRAM pid N`;
-- - another thread reads as its own name (Kineto's `thread 442 (pt_autograd_0)` as
--   `pt_autograd_0`), `thread TID` where it only inherited the program's name (native
--   pools: BLAS, OpenMP), after `ROLE: ` in a process with a role (or `PROGRAM pid N: `);
-- - brackets instead of parentheses and no '<' or ';', so short names leave it as it is.
CREATE PERFETTO TABLE xpu_thread_root AS
WITH
  th AS (
    SELECT t.utid, t.tid, t.upid, p.pid,
           coalesce(t.is_main_thread, t.tid = p.pid, 0) AS main,
           CASE WHEN t.name GLOB 'thread [0-9]* (*)'
                THEN substr(t.name, instr(t.name, '(') + 1,
                            length(t.name) - instr(t.name, '(') - 1)
                ELSE t.name END AS name,
           p.name AS pname
    FROM thread t LEFT JOIN process p USING (upid)
  ),
  pr AS (
    SELECT DISTINCT upid, pid,
           CASE WHEN pname GLOB '?* (*)' THEN substr(pname, 1, instr(pname, ' (') - 1) END
             AS role,
           CASE WHEN pname GLOB '?* (*)'
                THEN substr(pname, instr(pname, ' (') + 2, length(pname) - instr(pname, ' (') - 2)
                ELSE pname END AS program
    FROM th WHERE upid IS NOT NULL
  ),
  -- the processes whose threads are in the stacks: sampled, or launching GPU work
  busy_upid AS (
    SELECT DISTINCT t.upid FROM (
      SELECT DISTINCT utid FROM xpu_cpu_sample UNION SELECT DISTINCT utid FROM _xpu_launched_api
    ) u JOIN thread t USING (utid)
  ),
  plain AS (
    SELECT count(*) AS n FROM pr JOIN busy_upid USING (upid) WHERE pr.role IS NULL
  ),
  labelled AS (
    SELECT th.utid,
           CASE
             WHEN pr.role IS NOT NULL THEN pr.role
             WHEN (SELECT n FROM plain) <= 1 THEN 'main'
             ELSE coalesce(pr.program, 'process') || ' pid ' || coalesce(th.pid, '?')
           END AS process_label,
           th.main, pr.role,
           CASE WHEN th.name IS NULL OR th.name = '' OR th.name = pr.program
                     OR th.name = th.pname
                THEN 'thread ' || th.tid ELSE th.name END AS thread_label
    FROM th LEFT JOIN pr USING (upid)
  )
SELECT utid,
       replace(replace(replace(replace(replace(
         CASE
           WHEN main THEN process_label
           WHEN role IS NOT NULL OR process_label != 'main'
             THEN process_label || ': ' || thread_label
           ELSE thread_label
         END, ';', ':'), '(', '['), ')', ']'), '<', '‹'), '>', '›') AS root
FROM labelled;

-- The names of the CPU slices enclosing each launching call's parent, root first, and
-- the parent's own: the call's enclosing slices, found once per parent (launches of one
-- aten op share it), sorted by parent for the join below.
CREATE PERFETTO TABLE _xpu_enclosing AS
SELECT p.parent_id,
       (SELECT group_concat(n, ';') FROM (
          SELECT replace(name, ';', ':') AS n FROM (
            SELECT a.name, a.depth FROM ancestor_slice(p.parent_id) a
            UNION ALL
            SELECT s.name, s.depth FROM slice s WHERE s.id = p.parent_id)
          ORDER BY depth)) AS context
FROM (SELECT DISTINCT parent_id FROM _xpu_launched_api WHERE parent_id IS NOT NULL
      ORDER BY parent_id) p;

CREATE PERFETTO INDEX _xpu_enclosing_parent ON _xpu_enclosing(parent_id);

-- The launch stack at each (thread, time), indexed for the join below.
CREATE PERFETTO TABLE _xpu_launch_stack_path AS
SELECT ls.utid, ls.ts, cp.path, cp.modules
FROM xpu_launch_stack ls JOIN xpu_callsite_path cp USING (callsite_id)
GROUP BY ls.utid, ls.ts
ORDER BY ls.utid, ls.ts;

CREATE PERFETTO INDEX _xpu_launch_stack_path_at ON _xpu_launch_stack_path(utid, ts);

-- CPU context of each API call that launched a kernel, copy or set: its launch stack when
-- the trace has one, else the names of the CPU slices enclosing it (python functions, aten
-- ops) -- what Kineto traces give.
-- context_modules: the launch stack's modules (NULL for enclosing slices).
CREATE PERFETTO TABLE xpu_api_context AS
SELECT api.id AS api_id, api.name AS api_name, r.root,
       coalesce(ls.path, e.context) AS context,
       ls.modules AS context_modules
FROM _xpu_launched_api api
LEFT JOIN _xpu_enclosing e ON e.parent_id = api.parent_id
LEFT JOIN _xpu_launch_stack_path ls ON ls.utid = api.utid AND ls.ts = api.ts
JOIN xpu_thread_root r ON r.utid = api.utid
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
  sum(g.weight_ns) AS weight_ns,
  sum(g.ops) AS ops
FROM _xpu_folded_gpu_call g
LEFT JOIN xpu_api_context c ON c.api_id = g.api_id
GROUP BY stack, modules;

CREATE PERFETTO TABLE xpu_folded_cpu AS
SELECT r.root || coalesce(';' || cp.path, '') AS stack,
       coalesce(';' || cp.modules, '') AS modules,  -- '' for the root
       count(*) AS samples
FROM xpu_cpu_sample s
JOIN xpu_thread_root r USING (utid)
LEFT JOIN xpu_callsite_path cp USING (callsite_id)
GROUP BY stack, modules;
