#!/usr/bin/env bash
# The answers suite on a GPU machine (device tool, .whl carried): each program of
# bench/workloads/idle_causes.py under `record`, the traces packed into $OUT/traces.tgz for
# bench/answers_report.py to check here.
#   bash bench/answers_gpu.sh [MODE...]
set -uo pipefail
out=${OUT:-/tmp/answers}
mkdir -p "$out" /tmp/answers-traces
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(sync dataloader preprocess pageable launch_bound fp32_gemm gpu_bound
    loader_workers infer_preprocess sync_then_prep producer_thread file_reads nvtx_steps cuda_graph)
for mode in "${modes[@]}"; do
    echo "== $mode $(date +%T)"
    python3 -m collector.commands.record --no-kernel-stacks \
        -o "/tmp/answers-traces/$mode.perfetto-trace" -- \
        python3 -m bench.workloads.idle_causes "$mode" 2>&1 | grep -E 'idle_causes |wrote|records:|error'
done
tar -C /tmp/answers-traces -czf "$out/traces.tgz" .
ls -la /tmp/answers-traces
