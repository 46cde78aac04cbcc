"""What NVML answers on this machine, for the GPU counter source (record --gpu-metrics):
the bindings' version, the driver, each GPU's GPM support, every catalog metric's return
code and value over 200 ms, and what one read of every counter costs record's thread.
Prints JSON."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.gpu_metrics import catalog
from collector.gpu_metrics.choice import choose
from collector.gpu_metrics.sampler import CounterSampler


def main() -> None:
    import pynvml

    out: dict[str, object] = {"uid": __import__("os").getuid()}
    try:
        from importlib.metadata import version

        out["nvidia_ml_py"] = version("nvidia-ml-py")
    except Exception as exc:
        out["nvidia_ml_py"] = repr(exc)
    choice = choose(None)
    out["source"] = choice.source
    out["refused"] = choice.refused
    if choice.nvml is not None:
        out["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
    devices = []
    for d in choice.devices:
        entry: dict[str, object] = {"device": d.device, "name": d.name, "source": d.source}
        if d.gpm is not None:
            d.gpm.read()
            time.sleep(0.2)
            values = d.gpm.read()
            entry["gpm"] = {
                c.name: (v, d.gpm.failures.get(c.name))
                for c, v in zip(d.gpm.counters, values, strict=True)
            }
        entry["instant"] = dict(
            zip((c.name for c in d.instant.counters), d.instant.read(), strict=True)
        )
        entry["instant_failures"] = d.instant.failures
        devices.append(entry)
    out["devices"] = devices
    if choice.devices:
        sampler = CounterSampler(choice.devices, 100_000_000)
        sampler.begin()
        t0 = time.perf_counter()
        for _ in range(100):
            sampler.tick()
        out["tick_us"] = (time.perf_counter() - t0) / 100 * 1e6
    out["catalog"] = [c.name for c in catalog.GPM_COUNTERS]
    choice.close()
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
