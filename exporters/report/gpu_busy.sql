-- needs: analysis.span
-- defines: xpu_report_window
-- The span the report's busy/idle table and timeline measure over (gpu_busy.py): the
-- analysis span (exporters/analysis/span.sql, loaded first): the active span by default,
-- the whole trace with --span all.
CREATE PERFETTO VIEW xpu_report_window AS
SELECT ts AS start_ts, end_ts, dur FROM xpu_analysis_span;
