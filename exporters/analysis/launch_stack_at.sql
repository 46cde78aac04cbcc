-- needs: perfetto.engine.xpu_views
-- defines: _xpu_launch_stack_at
-- Launch stacks by time, for finding the stack of an API call (same thread, same ts).
-- Needs: the shared views (xpu_launch_stack).
CREATE PERFETTO TABLE _xpu_launch_stack_at AS
SELECT ts, utid, callsite_id FROM xpu_launch_stack ORDER BY ts;
CREATE PERFETTO INDEX _xpu_launch_stack_at_ts ON _xpu_launch_stack_at(ts);
