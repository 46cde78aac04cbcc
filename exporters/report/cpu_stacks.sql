-- Heaviest CPU stacks (timer samples).  Needs exporters/folded/stacks.sql.
SELECT stack,
       samples,
       100.0 * samples / (SELECT sum(samples) FROM xpu_folded_cpu) AS pct
FROM xpu_folded_cpu
ORDER BY samples DESC, stack
LIMIT {top};
