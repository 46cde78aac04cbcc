-- Every distinct CPU stack with its frames' modules and sample count: the input of the
-- report's "Top functions" section (exporters/report/top_functions.py), which filters the
-- frames and counts self and total per function in Python.
-- Needs exporters/folded/stacks.sql.
SELECT stack, modules, samples FROM xpu_folded_cpu;
