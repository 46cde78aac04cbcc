-- needs: analysis.steps
-- defines: _xpu_steps_scope
-- params: span_all bool, asked_steps str, detect bool, chosen_steps str, steps_how str
-- What the span and steps were built for (tables.load_steps): the span asked for, the glob of
-- marked steps asked for ('' for the default), whether steps are detected, and the steps
-- chosen and how (step_ranges.StepChoice).  A second look at the same trace reads them back.
CREATE PERFETTO TABLE _xpu_steps_scope AS
SELECT $span_all AS span_all, $asked_steps AS steps_glob, $detect AS detect,
       $chosen_steps AS chosen, $steps_how AS how;
