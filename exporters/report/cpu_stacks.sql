-- needs: folded.stacks
-- returns: stack, modules, samples
-- Every distinct CPU stack (timer samples) with its frames' modules; queries.py filters the
-- frames (exporters/folded/frames.py), adds up the stacks that become equal and keeps the
-- heaviest.  Needs exporters/folded/stacks.sql.
SELECT stack, modules, samples
FROM xpu_folded_cpu
ORDER BY samples DESC, stack;
