-- needs: analysis.steps
-- inputs: _xpu_step_kind_busy
-- defines: xpu_step_busy
-- Per step: GPU busy by kind of work, summed over the step's devices (_xpu_step_device,
-- steps.sql), and how many devices.  _xpu_step_kind_busy: the time the busy islands of
-- each kind cover inside each step (steps.py, from busy.py's islands).
CREATE PERFETTO TABLE xpu_step_busy AS
WITH devices AS MATERIALIZED (SELECT step, count(*) AS n FROM _xpu_step_device GROUP BY step)
SELECT st.step, st.name, st.ts, st.dur, st.source, dv.n AS devices,
       coalesce(b.compute_ns, 0) AS compute_ns,
       coalesce(b.nccl_ns, 0) AS nccl_ns,
       coalesce(b.memcpy_ns, 0) AS memcpy_ns,
       coalesce(b.memset_ns, 0) AS memset_ns,
       coalesce(b.busy_ns, 0) AS busy_ns
FROM xpu_step st
JOIN devices dv ON dv.step = st.step
LEFT JOIN _xpu_step_kind_busy b ON b.step = st.step
ORDER BY st.step;
