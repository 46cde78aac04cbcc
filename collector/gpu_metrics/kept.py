"""The counters of a recording on disk, beside its streams (`gpu_metrics/` of record's
stream directory), written when the target ends: if the trace cannot be written,
`record --from-streams` writes them too (collector/recording/kept_streams.py).

`series.npz` holds each series' times and values (s<i>_ts, s<i>_values); `series.json`
what they are (device, GPU name, counter, unit) and what the summary and metadata said."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collector import model
from collector.owned_files import read_owned, write_new

ARRAYS = "series.npz"
INDEX = "series.json"


@dataclass(frozen=True)
class KeptCounters:
    devices: list[model.GpuDevice]
    series: list[model.GpuCounterSeries]
    stats: dict[str, int]
    metadata: dict[str, model.ArgValue]
    summary_lines: list[str]


def save(
    directory: Path,
    devices: Sequence[model.GpuDevice],
    series: Iterable[model.GpuCounterSeries],
    stats: Mapping[str, int],
    metadata: Mapping[str, model.ArgValue],
    summary_lines: Sequence[str],
) -> None:
    arrays: dict[str, np.ndarray] = {}
    index = []
    for i, s in enumerate(series):
        arrays[f"s{i}_ts"] = np.asarray(s.ts, np.int64)
        arrays[f"s{i}_values"] = np.asarray(s.values, np.float64)
        index.append({"device": s.device, "name": s.name, "unit": s.unit})
    buffer = io.BytesIO()
    np.savez(buffer, allow_pickle=False, **arrays)
    # New names only (record's own directory; never a name someone planted).
    write_new(directory / ARRAYS, buffer.getvalue())
    text = (
        json.dumps(
            {
                "devices": [{"device": d.device, "name": d.name} for d in devices],
                "series": index,
                "stats": dict(stats),
                "metadata": dict(metadata),
                "summary_lines": list(summary_lines),
            },
            indent=1,
        )
        + "\n"
    )
    write_new(directory / INDEX, text.encode())


def load(directory: Path) -> KeptCounters:
    raw = json.loads(read_owned(directory / INDEX))
    with np.load(io.BytesIO(read_owned(directory / ARRAYS))) as arrays:
        series = [
            model.GpuCounterSeries(
                int(s["device"]), s["name"], s["unit"], arrays[f"s{i}_ts"], arrays[f"s{i}_values"]
            )
            for i, s in enumerate(raw["series"])
        ]
    return KeptCounters(
        [model.GpuDevice(int(d["device"]), d["name"]) for d in raw["devices"]],
        series,
        {k: int(v) for k, v in raw["stats"].items()},
        raw["metadata"],
        list(raw["summary_lines"]),
    )


def events(kept: KeptCounters) -> Iterator[model.Event]:
    yield from kept.devices
    yield from kept.series
