"""GPU hardware counters over time (record --gpu-metrics): which counters there are
(catalog.py), which source may read them here (choice.py), reading them through NVML
(nvml_readers.py) on a thread of `record` (sampler.py)."""
