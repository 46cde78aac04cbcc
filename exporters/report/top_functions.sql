-- needs: perfetto.engine.xpu_views, folded.stacks, analysis.steps
-- params: span_all bool
-- returns: stack, modules, samples
-- Every distinct CPU stack of the samples in the analysis's focus (the steady state: from
-- each process's second step, else the active span; the whole trace when it has no GPU
-- work, or with $span_all = 1: `report --span all`) with its frames' modules and sample count: the input of the report's "Top
-- functions" sections (exporters/report/top_functions.py), which filters the frames and
-- counts self and total per function in Python.  Set-up before the focus (imports, model
-- construction) is counted apart, so the steady state's functions are not ranked under it.
-- Needs exporters/folded/stacks.sql and the analysis tables (exporters/analysis).
SELECT r.root || coalesce(';' || cp.path, '') AS stack,
       coalesce(';' || cp.modules, '') AS modules,
       count(*) AS samples
FROM xpu_cpu_sample s
JOIN xpu_analysis_focus f ON $span_all OR s.ts BETWEEN f.ts AND f.end_ts
JOIN xpu_thread_root r USING (utid)
LEFT JOIN xpu_callsite_path cp USING (callsite_id)
GROUP BY stack, modules;
