#!/usr/bin/env bash
# Issue 23 on the lent H100 (device tool, .whl carried): a better counter source refused on
# the real GPU, the fallback used and named, and what the counters cost, measured quietly.
#  1. counters held by another profiled process: record A (CUPTI PM sampling) runs the
#     three phases of bench/workloads/gpu_phases.py for 8 s; 3 s in, record B profiles the
#     same GPU with its own phases.  B's summary and metadata say which source it got
#     and why PM sampling was refused; A keeps its samples.
#  2. as nobody: the driver's profiling restriction as this machine has it, and the source
#     an unprivileged record gets under it.
#  3. the counters' cost on the launch-bound step: bench/gpu_metrics_cost.py with every run
#     pinned to the same CPUs, without ASLR, rounds until the time budget.
# Logs, the traces (tar) and the cost JSON land in $OUT; read the traces back here with
# `xpu-perf query` (the GPU machine has no wasmtime).
set -uo pipefail
out=${OUT:-/tmp/gpu-metrics-busy}
work=/tmp/gpu-metrics-busy-work
rm -rf "$work"; mkdir -p "$out" "$work"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
grep -i -E "RmProfilingAdminOnly|RestrictProfiling" /proc/driver/nvidia/params

echo "== 1. counters held by another profiled process"
python3 -m collector.cli record --no-cpu -o "$work/holder.perfetto-trace" \
    -- python3 -m bench.workloads.gpu_phases --seconds 8 > "$work/holder.log" 2>&1 &
holder=$!
sleep 12  # torch import and CUDA start-up, then into the phases
python3 -m collector.cli record --no-cpu -o "$work/second.perfetto-trace" \
    -- python3 -m bench.workloads.gpu_phases --seconds 2 > "$work/second.log" 2>&1
echo "second record: exit $?"
wait "$holder"; echo "holder record: exit $?"
echo "-- holder"; cat "$work/holder.log"; echo "-- second"; cat "$work/second.log"

echo "== 2. as nobody"
nb=/tmp/xpu-nobody; rm -rf "$nb"; mkdir -p "$nb/home"; chmod 777 "$nb/home"
cp -r collector exporters cupti_inject protos bench pyproject.toml "$nb/"; chmod -R a+rX "$nb" /tmp/xpu-deps
setpriv --reuid=65534 --regid=65534 --clear-groups env HOME="$nb/home" \
    XPU_PERF_CACHE="$nb/home/cache" PYTHONPATH="/tmp/xpu-deps:$nb" PATH="$PATH" \
    bash -c "cd $nb && python3 -m collector.inject_build >/dev/null; id; \
        python3 -m collector.cli record --no-cpu -o $nb/home/nobody.perfetto-trace \
        -- python3 -m bench.workloads.gpu_phases --seconds 1"
cp "$nb/home/nobody.perfetto-trace" "$work/" 2>/dev/null
tar -C "$work" -czf "$out/traces.tar.gz" --exclude='*.log' .

echo "== 3. cost (launch_bound, pinned, no ASLR)"
python3 bench/gpu_metrics_cost.py "$out" --steps 800 --rounds 40 --pin 2-5 --no-aslr \
    --budget-s "${COST_BUDGET_S:-330}"
ls -la "$out"
