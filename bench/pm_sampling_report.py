"""Reads back what bench/pm_sampling_gpu.sh left (the tarball unpacked here: reading traces
needs wasmtime, which the GPU machine lacks): per trace the source that ran, what was refused,
the samples CUPTI dropped, each phase's counter means; then the checks of issue 23 on the PM
sampling trace.  The checks pass only on PM samples: the trace must hold PM samples and a
counter only PM sampling gives (SM issue %), and no percentage may read over 100.

    mkdir -p /tmp/pm && tar -C /tmp/pm -xzf pm_sampling.tar.gz
    python3 bench/pm_sampling_report.py /tmp/pm [--json pm_sampling.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.gpu_metrics_report import phase_means, print_phases
from collector.gpu_metrics import catalog
from exporters.perfetto.engine.trace_processor import open_trace

TRACES = ("pm_root", "pm_no_gpm", "pm_overflow", "pm_nobody")
SHOWN = (
    catalog.SM_ACTIVE,
    catalog.SM_ISSUE,
    catalog.SM_OCCUPANCY,
    catalog.TENSOR_ACTIVE,
    catalog.DRAM_BANDWIDTH,
    catalog.DRAM_READ,
    catalog.DRAM_WRITE,
)


def checks(phases: dict[str, dict[str, float]]) -> list[tuple[str, bool | None, str]]:
    """(what, passed (None: no value), the value) for each expectation of the issue."""

    def value(phase: str, metric: str) -> float | None:
        return phases.get(phase, {}).get(metric)

    def check(what: str, got: float | None, ok: bool) -> tuple[str, bool | None, str]:
        return (what, None if got is None else ok, "-" if got is None else f"{got:.1f}")

    tensor_gemm = value("gemm", catalog.TENSOR_ACTIVE)
    dram_gemm = value("gemm", catalog.DRAM_BANDWIDTH)
    dram_add = value("vector_add", catalog.DRAM_BANDWIDTH)
    tensor_add = value("vector_add", catalog.TENSOR_ACTIVE)
    sm_idle = value("idle", catalog.SM_ACTIVE)
    return [
        check("gemm: tensor active >= 50%", tensor_gemm, (tensor_gemm or 0) >= 50),
        check("gemm: DRAM bandwidth < 40%", dram_gemm, (dram_gemm or 0) < 40),
        check("vector_add: DRAM bandwidth >= 70%", dram_add, (dram_add or 0) >= 70),
        check("vector_add: tensor active < 2%", tensor_add, (tensor_add or 0) < 2),
        check("idle: SM active < 2%", sm_idle, (sm_idle or 0) < 2),
    ]


def track_stats(path: Path) -> dict[str, tuple[int, float]]:
    """Each counter track's number of values and highest value."""
    with open_trace(path) as trace:
        rows = trace.query(
            "select t.name as name, count(*) as n, max(c.value) as top from counter c "
            "join counter_track t on c.track_id = t.id group by t.name"
        )
    return {r["name"]: (int(r["n"]), float(r["top"])) for r in rows}


def pm_checks(res: dict[str, Any]) -> list[tuple[str, bool | None, str]]:
    """That the values are PM sampling's: samples decoded (the final flush's count, or the
    points of a counter only PM sampling gives, SM issue %, where that flush was lost), and
    no share over 100% (105: a sample's edges)."""
    stats = res["tracks"]
    counted = int(res["metadata"].get("gpu_metrics_pm_samples") or 0)
    on_track = stats.get(catalog.SM_ISSUE, (0, 0.0))[0]
    shares = {name: top for name, (_, top) in stats.items() if name.endswith(" %")}
    worst = max(shares.items(), key=lambda kv: kv[1], default=("-", 0.0))
    return [
        ("PM samples decoded (final count)", counted > 0, str(counted)),
        (f"{catalog.SM_ISSUE} (PM only) has samples", on_track > 0, str(on_track)),
        ("no % counter over 105", worst[1] <= 105.0, f"{worst[0]} {worst[1]:.1f}"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("dir", type=Path)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    out: dict[str, Any] = {}
    for name in TRACES:
        path = args.dir / f"{name}.perfetto-trace"
        if not path.exists():
            print(f"\n{name}: no trace")
            continue
        res = phase_means(path)
        res["tracks"] = track_stats(path)
        out[name] = res
        meta = res["metadata"]
        print(f"\n{name}: source {meta.get('gpu_metrics_source')}")
        print(f"  refused: {meta.get('gpu_metrics_refused')}")
        print(f"  missing: {meta.get('gpu_metrics_missing')}")
        pm = {k: v for k, v in meta.items() if k.startswith("gpu_metrics_pm")}
        print(f"  PM sampling: {pm}")
        print_phases(res, SHOWN, 50)
    root = out.get("pm_root")
    if root:
        print("\nchecks (pm_root):")
        source = str(root["metadata"].get("gpu_metrics_source"))
        results = [("source is cupti_pm_sampling", "cupti_pm_sampling" in source, source)]
        results += pm_checks(root)
        # The values' checks count only where the values are PM sampling's (the source and
        # its samples; a share over 105% is reported on its own: the H100 read SM active up
        # to 113% in a few 100 ms samples of its own tracks; why is not known).
        pm_ok = all(ok for what, ok, _ in results if "over 105" not in what)
        results += [
            (w, ok if pm_ok or ok is None else False, got) for w, ok, got in checks(root["phases"])
        ]
        for what, ok, got in results:
            print(f"  {'PASS' if ok else 'FAIL' if ok is False else 'N/A '}  {what:36s} {got}")
        out["checks"] = results
    overhead = args.dir / "overhead.json"
    if overhead.exists():
        out["overhead"] = json.loads(overhead.read_text())
        print("\noverhead (launch_bound ms/step, median of 3 runs):")
        for mode, ms in out["overhead"]["median_ms"].items():
            print(f"  {mode:24s} {ms:.3f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
