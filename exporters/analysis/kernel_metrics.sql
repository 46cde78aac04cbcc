-- needs: perfetto.engine.xpu_views, analysis.gpu_metrics
-- defines: _xpu_interval_counter, _xpu_kernel, _xpu_grid, _xpu_kernel_k, _xpu_kernel_piece,
--   xpu_kernel_metrics
-- params: interval_metrics str_list
-- GPU counters per kernel: each interval counter (GPM, PM sampling: $interval_metrics) averaged over
-- each kernel's interval, weighted by time.  Needs: gpu_metrics.sql.
-- The counters of one device are read together, so their values share times: the grid.
-- Each kernel is placed on its device's grid by one sweep (its start and end merged in
-- time order with the grid's times, each taking the grid interval at or before it by a
-- running maximum): no kernel is compared with every interval.  A kernel inside one
-- interval (nearly all: kernels are short next to a 100 ms read period) reads that
-- interval's values; one that crosses intervals reads each by its overlap.

CREATE PERFETTO TABLE _xpu_interval_counter AS
SELECT * FROM xpu_gpu_counter WHERE metric IN ($interval_metrics);

-- The kernels of the devices with interval counters (none: the sweep below costs nothing).
CREATE PERFETTO TABLE _xpu_kernel AS
SELECT g.id, g.ts, g.ts + g.dur AS end_ts, g.name, t.parent_id AS device_track_id
FROM xpu_gpu_op g JOIN track t ON t.id = g.track_id
WHERE g.category = 'kernel' AND g.dur > 0
  AND t.parent_id IN (SELECT device_track_id FROM _xpu_interval_counter);

-- Each device's grid: the times its interval counters have values at, numbered.
CREATE PERFETTO TABLE _xpu_grid AS
SELECT device_track_id, ts,
       LEAD(ts) OVER (PARTITION BY device_track_id ORDER BY ts) AS end_ts,
       ROW_NUMBER() OVER (PARTITION BY device_track_id ORDER BY ts) AS k
FROM (
  SELECT DISTINCT ic.device_track_id, s.ts
  FROM _xpu_counter_step s JOIN _xpu_interval_counter ic USING (track_id)
  UNION
  SELECT DISTINCT ic.device_track_id, s.end_ts
  FROM _xpu_counter_step s JOIN _xpu_interval_counter ic USING (track_id)
)
ORDER BY device_track_id, k;
CREATE PERFETTO INDEX _xpu_grid_k ON _xpu_grid(device_track_id, k);

-- The grid interval of each kernel's start and end (NULL: before the first grid time).
CREATE PERFETTO TABLE _xpu_kernel_k AS
-- At one time: a kernel's end before the grid time (it ends in the interval before), a
-- kernel's start after it (it starts in the interval that begins there).
WITH edge AS (
  SELECT device_track_id, end_ts AS ts, 0 AS ord, id, 1 AS is_end, NULL AS k FROM _xpu_kernel
  UNION ALL
  SELECT device_track_id, ts, 1, NULL, NULL, k FROM _xpu_grid
  UNION ALL
  SELECT device_track_id, ts, 2, id, 0, NULL FROM _xpu_kernel
),
carried AS (
  SELECT id, is_end,
         MAX(k) OVER (PARTITION BY device_track_id ORDER BY ts, ord ROWS UNBOUNDED PRECEDING) AS k
  FROM edge
)
SELECT id, MAX(CASE WHEN is_end = 0 THEN k END) AS k_start,
       MAX(CASE WHEN is_end = 1 THEN k END) AS k_end
FROM carried WHERE id IS NOT NULL GROUP BY id;

-- Each kernel's time in each grid interval it overlaps.
--   id, name: the kernel; device_track_id; ts: the grid interval's start; overlap: ns.
CREATE PERFETTO TABLE _xpu_kernel_piece AS
SELECT k.id, k.name, k.device_track_id, g.ts,
       MIN(k.end_ts, g.end_ts) - MAX(k.ts, g.ts) AS overlap
FROM _xpu_kernel k
JOIN _xpu_kernel_k kk USING (id)
JOIN _xpu_grid g
  ON g.device_track_id = k.device_track_id AND g.k = kk.k_start AND kk.k_start = kk.k_end
WHERE g.end_ts IS NOT NULL
UNION ALL
SELECT k.id, k.name, k.device_track_id, g.ts,
       MIN(k.end_ts, g.end_ts) - MAX(k.ts, g.ts) AS overlap
FROM _xpu_kernel k
JOIN _xpu_kernel_k kk USING (id)
JOIN _xpu_grid g
  ON g.device_track_id = k.device_track_id
 AND g.k BETWEEN COALESCE(kk.k_start, 1) AND kk.k_end
WHERE kk.k_start IS NOT kk.k_end AND kk.k_end IS NOT NULL AND g.end_ts IS NOT NULL
  AND MIN(k.end_ts, g.end_ts) > MAX(k.ts, g.ts);

-- Each kernel's interval counters, averaged over its interval (weighted by time); a view:
-- kernels x counters rows, computed when read.
--   id: the kernel's slice; ts, dur, name: the kernel's; device_track_id: its GPU's
--   track; metric: the counter's name; value: the counter's mean over the part of the
--   kernel that the counter's values cover; coverage: that part (0..1; a kernel before
--   the first value or after the last has less than 1, none: no row).
CREATE PERFETTO VIEW xpu_kernel_metrics AS
SELECT p.id, s.ts, s.dur, s.name, p.device_track_id, ic.metric,
       SUM(c.value * p.overlap) * 1.0 / SUM(p.overlap) AS value,
       SUM(p.overlap) * 1.0 / s.dur AS coverage
FROM _xpu_kernel_piece p
JOIN _xpu_interval_counter ic USING (device_track_id)
JOIN _xpu_counter_step c ON c.track_id = ic.track_id AND c.ts = p.ts
JOIN slice s ON s.id = p.id
GROUP BY p.id, ic.track_id;
