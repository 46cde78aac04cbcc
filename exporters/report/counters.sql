-- needs: perfetto.engine.xpu_views
-- returns: source, counter, value
-- Every number the producer wrote into the trace (drop / match / lost counters and
-- totals), then trace_processor's own import problems.  Needs xpu_views.sql.
SELECT 'xpu-perf' AS source, key AS counter, coalesce(int_value, real_value) AS value
FROM xpu_metadata
WHERE int_value IS NOT NULL OR real_value IS NOT NULL
UNION ALL
SELECT 'trace_processor (' || severity || ')' AS source,
       name || CASE WHEN idx IS NOT NULL THEN '[' || idx || ']' ELSE '' END AS counter,
       value
FROM stats
WHERE severity IN ('error', 'data_loss') AND value > 0;
