#!/usr/bin/env bash
# Issue 23, CUPTI PM sampling, on the lent H100 (device tool, .whl carried; ~3 min of GPU):
#  1. bench/workloads/gpu_phases.py (idle, bf16 GEMM, vector add) recorded as root at the
#     default rate: PM sampling should run (gpu_metrics_source cupti_pm_sampling);
#  2. the same with NVML GPM kept off (XPU_PERF_GPM=off): tells a PM sampling refusal caused
#     by GPM holding the counters from one of its own;
#  3. the same at 1000 Hz with a small hardware buffer (XPU_PERF_PM_BUFFER_MB=1): samples
#     dropped by an overflowing buffer are counted;
#  4. as nobody (profiling restricted to admins by default: PM sampling refused, reason named,
#     NVML GPM runs);
#  5. the cost on the launch-bound step: record without counters, with them (PM sampling),
#     3 interleaved rounds of 200 steps, median of the per-run medians.
# It only records (each record prints its summary: source, PM samples, refusals); everything
# lands in $OUT as pm_sampling.tar.gz.  The GPU machine has no wasmtime to read traces back:
# unpack the tarball here and run bench/pm_sampling_report.py on it (the checks: PM samples
# present, no share over 100%, tensor >= 50% and DRAM low in the GEMM, DRAM >= 70% and
# tensor ~0 in the vector add, SM active ~0 idle).
set -uo pipefail
out=${OUT:-/tmp/pm-sampling}
work=/tmp/pm-sampling-work
rm -rf "$work"; mkdir -p "$out" "$work"
exec > >(tee "$work/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cat /proc/driver/nvidia/params 2>/dev/null | grep -i RmProfilingAdminOnly

echo "== 1. phases, root, default rate"
timeout 120 env XPU_PERF_PM_DEBUG=1 python3 -m collector.cli record --no-cpu \
    -o "$work/pm_root.perfetto-trace" -- python3 -m bench.workloads.gpu_phases --seconds 3
echo "== 2. phases, root, GPM off"
XPU_PERF_GPM=off timeout 120 python3 -m collector.cli record --no-cpu \
    -o "$work/pm_no_gpm.perfetto-trace" -- python3 -m bench.workloads.gpu_phases --seconds 2
echo "== 3. phases, root, 1000 Hz, 1 MiB hardware buffer"
XPU_PERF_PM_BUFFER_MB=1 timeout 120 python3 -m collector.cli record --no-cpu --gpu-metrics 1000 \
    -o "$work/pm_overflow.perfetto-trace" -- python3 -m bench.workloads.gpu_phases --seconds 2
echo "== 4. phases, nobody"
nb=/tmp/xpu-nobody; rm -rf "$nb"; mkdir -p "$nb/home"; chmod 777 "$nb/home"
cp -r collector exporters cupti_inject protos bench pyproject.toml "$nb/"; chmod -R a+rX "$nb" /tmp/xpu-deps
setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$nb/home" \
    XPU_PERF_CACHE="$nb/home/cache" PYTHONPATH="/tmp/xpu-deps:$nb" PATH="$PATH" \
    bash -c "cd $nb && timeout 120 python3 -m collector.cli record --no-cpu \
        -o $nb/home/pm_nobody.perfetto-trace -- python3 -m bench.workloads.gpu_phases --seconds 1"
cp "$nb/home/pm_nobody.perfetto-trace" "$work/" 2>/dev/null

echo "== 5. overhead (launch_bound, 200 steps, 3 rounds)"
timeout 240 python3 - "$work" <<'PY'
import json, re, statistics, subprocess, sys
work = ["python3", "-m", "bench.workloads.launch_bound", "--steps", "200", "--warmup", "20"]
rec = ["python3", "-m", "collector.cli", "record", "--no-cpu", "-q", "-o", "/tmp/ov.perfetto-trace"]
modes = {"record, no counters": rec + ["--no-gpu-metrics", "--"] + work,
         "record, counters 10 Hz": rec + ["--"] + work}
runs = {m: [] for m in modes}
for r in range(3):
    for m, cmd in modes.items():
        p = subprocess.run(cmd, capture_output=True, text=True)
        got = re.search(r"([0-9.]+) ms/step", p.stdout)
        runs[m].append(float(got.group(1)) if got else None)
        if not got:
            print(m, "failed:", p.stderr[-600:])
res = {m: statistics.median([x for x in v if x is not None] or [0]) for m, v in runs.items()}
for m, v in res.items():
    print(f"{m:24s} {v:.3f} ms/step  runs {runs[m]}")
json.dump({"runs": runs, "median_ms": res}, open(f"{sys.argv[1]}/overhead.json", "w"), indent=1)
PY

tar -C "$work" -czf "$out/pm_sampling.tar.gz" .
ls -la "$out"
echo "== report: on the machine with the checkout (wasmtime), not here:"
echo "   mkdir -p /tmp/pm && tar -C /tmp/pm -xzf pm_sampling.tar.gz && python3 bench/pm_sampling_report.py /tmp/pm"
