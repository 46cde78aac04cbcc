-- needs: analysis.gaps, analysis.steps, analysis.launch_stack_at, folded.stacks
-- params: gaps ident
-- returns: stack, modules, weight_ns
-- The idle stacks (idle_stacks.py): each gap's time on the launching thread's stacks, part
-- by part, folded; $gaps is xpu_gpu_gap (every gap of the analysed span) or xpu_focus_gap
-- (those the findings count).
WITH tot AS MATERIALIZED (
  SELECT gap_id, sum(covered_ns) AS c FROM _xpu_gap_sample GROUP BY gap_id
),
wtot AS MATERIALIZED (
  SELECT gap_id, sum(covered_ns) AS c FROM _xpu_gap_wait GROUP BY gap_id
),
sampled AS (
  SELECT g.utid, s.callsite_id,
         s.covered_ns * 1.0 * (g.data_ns - g.data_wait_ns + g.host_ns + g.launch_host_ns)
           / tot.c AS w,
         NULL AS leaf
  FROM _xpu_gap_sample s
  JOIN tot ON tot.gap_id = s.gap_id
  JOIN $gaps g ON g.id = s.gap_id
  WHERE tot.c > 0 AND g.data_ns - g.data_wait_ns + g.host_ns + g.launch_host_ns > 0
),
waited AS (
  SELECT g.utid, w.callsite_id,
         w.covered_ns * 1.0 * (g.wait_ns + g.data_wait_ns) / wtot.c AS w,
         '[waiting in ' || w.call || ']' AS leaf
  FROM _xpu_gap_wait w
  JOIN wtot ON wtot.gap_id = w.gap_id
  JOIN $gaps g ON g.id = w.gap_id
  WHERE wtot.c > 0 AND g.wait_ns + g.data_wait_ns > 0
),
calls AS MATERIALIZED (
  SELECT g.utid, b.ts, g.sync_ns AS w, '[waiting in ' || g.block_name || ']' AS leaf
  FROM $gaps g JOIN slice b ON b.id = g.block_id WHERE g.sync_ns > 0
  UNION ALL
  -- the launch path, and the host's launching where no sample shows its code
  SELECT g.utid, a.ts,
         g.launch_ns - CASE WHEN g.id IN (SELECT gap_id FROM tot WHERE c > 0)
                            THEN g.launch_host_ns ELSE 0 END,
         '[launch] ' || g.next_op
  FROM $gaps g JOIN slice a ON a.id = g.api_id WHERE g.launch_ns > 0
),
called AS (
  SELECT c.utid, ls.callsite_id, c.w, c.leaf FROM calls c
  LEFT JOIN _xpu_launch_stack_at ls ON ls.ts = c.ts AND ls.utid = c.utid
),
unsampled AS (
  -- host time of gaps with no sample (the CPU slices' guess), and the rest
  SELECT g.utid, NULL AS callsite_id,
         g.other_ns + CASE WHEN g.id IN (SELECT gap_id FROM tot WHERE c > 0) THEN 0
                           ELSE g.data_ns - g.data_wait_ns + g.host_ns END
         + CASE WHEN g.id IN (SELECT gap_id FROM wtot WHERE c > 0) THEN 0
                ELSE g.wait_ns + g.data_wait_ns END
         + CASE WHEN g.api_id IS NULL THEN g.launch_ns ELSE 0 END AS w,
         '[GPU idle: other]' AS leaf
  FROM $gaps g
)
SELECT coalesce(r.root, 'no thread') || coalesce(';' || cp.path, '')
       || coalesce(';' || replace(x.leaf, ';', ':'), '') AS stack,
       -- the frames' modules, '' for the root and the leaf (exporters/folded/frames.py)
       coalesce(';' || cp.modules, '') || CASE WHEN x.leaf IS NULL THEN '' ELSE ';' END
         AS modules,
       sum(x.w) AS weight_ns
FROM (SELECT * FROM sampled UNION ALL SELECT * FROM waited UNION ALL SELECT * FROM called
      UNION ALL SELECT * FROM unsampled) x
LEFT JOIN xpu_thread_root r USING (utid)
LEFT JOIN xpu_callsite_path cp USING (callsite_id)
WHERE x.w > 0
GROUP BY stack, modules
