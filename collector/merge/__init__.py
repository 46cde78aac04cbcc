"""`xpu-perf merge`: one trace out of per-node or per-rank traces (see traces.py)."""
