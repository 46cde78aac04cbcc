-- needs: analysis.step_busy
-- defines: xpu_analysis_scope
-- params: span_all bool, asked_steps str, detect bool, steps_how str
-- What the analysis tables were built for (tables.py's Scope): the whole trace or the
-- active span, the glob of marked steps asked for ('' for the default), whether steps are
-- detected where none are marked, and how the steps were found (what the output says).
-- Loaded last: a trace that has it has every analysis table.
CREATE PERFETTO TABLE xpu_analysis_scope AS
SELECT $span_all AS span_all, $asked_steps AS steps_glob, $detect AS detect,
       $steps_how AS steps_how;
