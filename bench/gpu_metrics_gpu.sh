#!/usr/bin/env bash
# Issue 23 on the lent H100 (device tool, .whl carried): GPU counters (record --gpu-metrics).
#  1. what NVML answers here, as root and as an unprivileged user (bench/gpu_metrics_probe.py);
#  2. the three phases of bench/workloads/gpu_phases.py (idle, bf16 GEMM, vector add) recorded
#     with the counters, as root and as nobody (which source runs, what is refused);
#  3. the counters' cost on the launch-bound training step: record without counters, at the
#     default 10 Hz and at 100 Hz, plus no recording at all; fresh process per run, modes
#     interleaved round by round, median of the per-run medians;
#  4. device memory: bench/workloads/memory_sites.py recorded (allocations of known sizes).
# Traces, logs and JSON land in $OUT; bench/gpu_metrics_report.py reads them back here.
set -uo pipefail
out=${OUT:-/tmp/gpu-metrics}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
rec() { python3 -m collector.cli record --no-cpu "$@"; }

echo "== 1. probe (root)"
python3 bench/gpu_metrics_probe.py > "$out/probe_root.json"; cat "$out/probe_root.json" | head -80
# An unprivileged copy: the checkout and the dependencies readable, a home of its own.
nb=/tmp/xpu-nobody; rm -rf "$nb"; mkdir -p "$nb/home"; chmod 777 "$nb/home"
cp -r collector exporters cupti_inject protos bench pyproject.toml "$nb/"; chmod -R a+rX "$nb" /tmp/xpu-deps
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$nb/home" \
    XPU_PERF_CACHE="$nb/home/cache" PYTHONPATH="/tmp/xpu-deps:$nb" PATH="$PATH" bash -c "cd $nb && $*"; }
echo "== 1b. probe (nobody)"
as_nobody python3 bench/gpu_metrics_probe.py > "$out/probe_nobody.json" 2> "$out/probe_nobody.err"
head -40 "$out/probe_nobody.json"; tail -3 "$out/probe_nobody.err"

echo "== 2. phases (root)"
rec -o "$out/phases.perfetto-trace" -- python3 -m bench.workloads.gpu_phases --seconds 3
echo "== 2b. phases (nobody)"
as_nobody python3 -m collector.cli record --no-cpu -o "$nb/home/phases_nobody.perfetto-trace" \
    -- python3 -m bench.workloads.gpu_phases --seconds 1
cp "$nb/home/phases_nobody.perfetto-trace" "$out/" 2>/dev/null

echo "== 3. overhead (launch_bound, 300 steps, 5 rounds)"
python3 - "$out" <<'PY'
import json, re, statistics, subprocess, sys
out = sys.argv[1]
work = ["python3", "-m", "bench.workloads.launch_bound", "--steps", "300", "--warmup", "30"]
rec = ["python3", "-m", "collector.cli", "record", "--no-cpu", "-q", "-o", "/tmp/ov.perfetto-trace"]
modes = {
    "baseline": work,
    "record, no counters": rec + ["--no-gpu-metrics", "--"] + work,
    "record, counters 10 Hz": rec + ["--"] + work,
    "record, counters 100 Hz": rec + ["--gpu-metrics", "100", "--"] + work,
}
runs = {m: [] for m in modes}
for r in range(5):
    for m, cmd in modes.items():
        p = subprocess.run(cmd, capture_output=True, text=True)
        got = re.search(r"([0-9.]+) ms/step", p.stdout)
        runs[m].append(float(got.group(1)) if got else None)
        if not got:
            print(m, "failed:", p.stderr[-800:])
res = {m: {"runs": v, "median_ms": statistics.median([x for x in v if x is not None] or [0])} for m, v in runs.items()}
ref = res["record, no counters"]["median_ms"]
for m, v in res.items():
    v["vs_no_counters_pct"] = (v["median_ms"] / ref - 1) * 100 if ref else None
    print(f"{m:26s} {v['median_ms']:.3f} ms/step  {v['vs_no_counters_pct']:+.2f}%  runs {v['runs']}")
json.dump(res, open(f"{out}/overhead.json", "w"), indent=1)
PY

if [ -f bench/workloads/memory_sites.py ]; then
  echo "== 4. device memory"
  rec -o "$out/memory.perfetto-trace" -- python3 -m bench.workloads.memory_sites
fi
ls -la "$out"
