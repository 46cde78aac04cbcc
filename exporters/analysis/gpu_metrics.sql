-- defines: xpu_gpu_counter, _xpu_counter_step
-- GPU counters per device (record --gpu-metrics writes them as counter tracks under each
-- `GPU D (<name>)` track: SM active %, tensor active %, DRAM bandwidth %, device memory
-- used, ...).  Needs: the shared views.  kernel_metrics.sql builds the per-kernel tables on
-- these.
-- A counter value holds from its time to the next value of its track; the last value of
-- a track has no end and is left out (a GPM value covers the interval up to the next
-- read, which the recording did not keep).

-- The counter tracks under a GPU's track.
--   track_id: the counter track; metric: its name (the counter); device_track_id: the
--   `GPU D (<name>)` track, the parent of the device's `Stream N` tracks too; device: its
--   name.
CREATE PERFETTO TABLE xpu_gpu_counter AS
SELECT t.id AS track_id, t.name AS metric, t.parent_id AS device_track_id, d.name AS device
FROM track t
JOIN track d ON d.id = t.parent_id
WHERE t.id IN (SELECT DISTINCT track_id FROM counter) AND d.name GLOB 'GPU *';

-- Each value of those tracks as an interval [ts, end_ts).
CREATE PERFETTO TABLE _xpu_counter_step AS
SELECT * FROM (
  SELECT c.track_id, c.ts,
         LEAD(c.ts) OVER (PARTITION BY c.track_id ORDER BY c.ts) AS end_ts, c.value
  FROM counter c
  WHERE c.track_id IN (SELECT track_id FROM xpu_gpu_counter)
)
WHERE end_ts IS NOT NULL
ORDER BY track_id, ts;
CREATE PERFETTO INDEX _xpu_counter_step_ts ON _xpu_counter_step(track_id, ts);
