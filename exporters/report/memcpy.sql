-- needs: perfetto.engine.xpu_views
-- returns: direction, count, bytes, total_ns, gb_per_s
-- Copy volume and bandwidth by direction.  Recorded traces carry `debug.copy_kind`
-- (HtoD, DtoH, ...); Kineto names the direction and memory kinds in the op name
-- ("Memcpy HtoD (Pinned -> Device)"), which is kept: pinned vs pageable is what explains
-- a slow copy.  Bandwidth counts only copies whose byte count is known; 1 B/ns = 1 GB/s.
WITH copies AS (
  SELECT dur,
         extract_arg(arg_set_id, 'debug.bytes') AS bytes,
         coalesce(extract_arg(arg_set_id, 'debug.copy_kind'),
                  CASE WHEN name GLOB 'Memcpy *' THEN substr(name, 8) ELSE name END)
           AS direction
  FROM xpu_gpu_op
  WHERE category = 'memcpy'
)
SELECT direction,
       count(*) AS count,
       sum(bytes) AS bytes,
       sum(dur) AS total_ns,
       1.0 * sum(bytes) / nullif(sum(CASE WHEN bytes IS NOT NULL THEN dur END), 0) AS gb_per_s
FROM copies
GROUP BY direction
ORDER BY bytes DESC, total_ns DESC;
