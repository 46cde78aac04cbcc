"""Looking at a trace: the offline Perfetto UI server, the report (tables, GPU utilisation
timeline, flamegraph) and its terminal and HTML renderings, all from SQL on the trace."""
