"""xpu-perf collector: sources of events (CUPTI, eBPF, Kineto files) and the CLI."""

__version__ = "0.1.0"
