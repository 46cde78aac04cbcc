-- GPU counters per device and per kernel (record --gpu-metrics writes them as counter
-- tracks under each `GPU D (<name>)` track: SM active %, tensor active %, DRAM bandwidth %,
-- device memory used, ...).  Needs: the shared views (xpu_gpu_op).
-- A counter value holds from its time to the next value of its track; the last value of
-- a track has no end and is left out (a GPM value covers the interval up to the next
-- read, which the recording did not keep).

-- The counter tracks under a GPU's track.
--   track_id: the counter track; metric: its name (the counter); device_track_id: the
--   `GPU D (<name>)` track, the parent of the device's `Stream N` tracks too.
CREATE PERFETTO TABLE xpu_gpu_counter AS
SELECT t.id AS track_id, t.name AS metric, t.parent_id AS device_track_id, d.name AS device
FROM track t
JOIN track d ON d.id = t.parent_id
WHERE t.id IN (SELECT DISTINCT track_id FROM counter) AND d.name GLOB 'GPU *';

-- Each value as an interval with the area (value x time) and the time before it.
CREATE PERFETTO TABLE _xpu_counter_interval AS
SELECT c.track_id, c.ts,
       LEAD(c.ts) OVER (PARTITION BY c.track_id ORDER BY c.ts) AS end_ts, c.value
FROM counter c
WHERE c.track_id IN (SELECT track_id FROM xpu_gpu_counter);

CREATE PERFETTO TABLE _xpu_counter_step AS
SELECT track_id, ts, end_ts, value,
       ROW_NUMBER() OVER (PARTITION BY track_id ORDER BY ts) AS k,
       COALESCE(SUM(value * (end_ts - ts)) OVER (
         PARTITION BY track_id ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
       ), 0) AS area_before,
       COALESCE(SUM(end_ts - ts) OVER (
         PARTITION BY track_id ORDER BY ts ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING
       ), 0) AS time_before
FROM _xpu_counter_interval
WHERE end_ts IS NOT NULL;

-- Each kernel's start and end against each counter of its device, merged in time order
-- with the counter's steps; each edge takes the step at or before it (the running
-- maximum of the step number), so no edge is compared with every step.
CREATE PERFETTO TABLE _xpu_kernel_edge AS
WITH kernel AS (
  SELECT g.id, g.ts, g.dur, t.parent_id AS device_track_id
  FROM xpu_gpu_op g JOIN track t ON t.id = g.track_id
  WHERE g.category = 'kernel' AND g.dur > 0
),
point AS (
  SELECT c.track_id, k.id AS kernel_id, k.ts AS ts, 0 AS is_end, NULL AS k
  FROM kernel k JOIN xpu_gpu_counter c USING (device_track_id)
  UNION ALL
  SELECT c.track_id, k.id, k.ts + k.dur, 1, NULL
  FROM kernel k JOIN xpu_gpu_counter c USING (device_track_id)
  UNION ALL
  SELECT track_id, NULL, ts, -1, k FROM _xpu_counter_step
),
carried AS (
  SELECT track_id, kernel_id, ts, is_end,
         MAX(k) OVER (PARTITION BY track_id ORDER BY ts, is_end ROWS UNBOUNDED PRECEDING) AS k
  FROM point
)
SELECT c.track_id, c.kernel_id, c.is_end,
       COALESCE(s.area_before + s.value * (MIN(c.ts, s.end_ts) - s.ts), 0) AS area,
       COALESCE(s.time_before + (MIN(c.ts, s.end_ts) - s.ts), 0) AS covered
FROM carried c
LEFT JOIN _xpu_counter_step s ON s.track_id = c.track_id AND s.k = c.k
WHERE c.kernel_id IS NOT NULL;

-- Each kernel's counters, averaged over its interval (weighted by time).
--   id: the kernel's slice; ts, dur, name: the kernel's; device_track_id: its GPU's
--   track; metric: the counter's name; value: the counter's mean over the part of the
--   kernel that counter values cover; coverage: that part (0..1; a kernel before the
--   first value or after the last has less than 1, none: no row).
CREATE PERFETTO TABLE xpu_kernel_metrics AS
SELECT s.id, s.ts, s.dur, s.name, gc.device_track_id, gc.metric,
       (e.area - b.area) / (e.covered - b.covered) AS value,
       (e.covered - b.covered) * 1.0 / s.dur AS coverage
FROM _xpu_kernel_edge b
JOIN _xpu_kernel_edge e ON e.track_id = b.track_id AND e.kernel_id = b.kernel_id AND e.is_end = 1
JOIN slice s ON s.id = b.kernel_id
JOIN xpu_gpu_counter gc ON gc.track_id = b.track_id
WHERE b.is_end = 0 AND e.covered > b.covered;
