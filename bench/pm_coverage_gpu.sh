#!/usr/bin/env bash
# Issue 34, "GPU counters go missing without a word", on the lent H200 (device tool, .whl
# carried; ~2 min of GPU): a short program, no idle phase, 0.5 s of bf16 GEMMs then 0.2 s of
# a DRAM-bound vector add, recorded with PM sampling at the default rate and at 100 Hz, with
# the library's PM debug lines.  The traces come back in $OUT/pm_coverage.tar.gz; read them
# here with bench/pm_coverage_report.py (which phase has PM samples, what the summary said).
set -uo pipefail
out=${OUT:-/tmp/pm-coverage}
work=/tmp/pm-coverage-work
rm -rf "$work"; mkdir -p "$out" "$work"
exec > >(tee "$work/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
prog=(python3 -m bench.workloads.gpu_phases --idle-seconds 0 --gemm-seconds 0.5 --vector-seconds 0.2)
for rate in 10 100; do
    echo "== PM sampling at $rate Hz"
    timeout 180 env XPU_PERF_PM_DEBUG=1 python3 -m collector.cli record --no-cpu \
        --gpu-metrics "$rate" -o "$work/short_${rate}hz.perfetto-trace" -- "${prog[@]}"
done
tar -C "$work" -czf "$out/pm_coverage.tar.gz" .
ls -la "$out"
