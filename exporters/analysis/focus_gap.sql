-- needs: analysis.gaps, analysis.steps
-- defines: xpu_focus_gap
-- The gaps the findings explain: those starting in the focus (steps.sql), once the gaps are.
CREATE PERFETTO VIEW xpu_focus_gap AS
SELECT g.* FROM xpu_gpu_gap g, xpu_analysis_focus f
WHERE g.ts >= f.ts AND g.ts < f.end_ts;
