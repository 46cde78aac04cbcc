#!/usr/bin/env bash
# Issue 37's programs with indirect causes on a GPU machine (device tool, .whl carried):
# its modes of bench/workloads/idle_causes.py and the small GPT-2 training loop under `record`
# (defaults: in-process CPU sampler with blocked-call capture), and once more under
# torch.profiler (Kineto JSON, for HolisticTraceAnalysis's answer, read on the checkout's
# machine).  With 2 GPUs (kind nvidia-h200-x2): DDP with rank 1 slowed by host work, then by
# a bigger batch, each recorded around torchrun.  Everything lands in $OUT/indirect.tgz;
# bench/indirect_report.py reads it.
#   bash bench/indirect_gpu.sh [single|ddp]
set -uo pipefail
what=${1:-single}
out=${OUT:-/tmp/indirect}
work=/tmp/indirect-work
rm -rf "$work"; mkdir -p "$out" "$work"
exec > >(tee "$work/log_$what.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
rec() { timeout 300 python3 -m collector.cli record -o "$work/$1.perfetto-trace" -- "${@:2}" \
    2>&1 | grep -E 'idle_causes|gpt2|ddp_steps|wrote|dropped|waits|error|Traceback'; }
if [ "$what" = single ]; then
    for mode in slow_workers infer_vocab sync_then_cpu producer_lists jsonl_reads nvtx_sync_steps; do
        echo "== $mode $(date +%T)"
        rec "$mode" python3 -m bench.workloads.idle_causes "$mode"
        timeout 300 python3 -m bench.workloads.idle_causes "$mode" --kineto "$work/$mode.kineto.json" \
            | tail -1
    done
    echo "== gpt2 $(date +%T)"
    rec gpt2 python3 -m bench.workloads.gpt2_train 40
else
    for by in host gpu; do
        # gpu: width 4096 and ddp_steps' GPU-bound defaults (8192 / 16384 rows, bf16): at
        # 2048 and 256 / 512 rows fp32 the step was launch-bound and rank 1 no straggler.
        width=$([ "$by" = gpu ] && echo 4096 || echo 2048)
        echo "== ddp_$by $(date +%T)"
        rec "ddp_$by" torchrun --nproc-per-node=2 --master-port=$((29500 + RANDOM % 1000)) \
            -m bench.workloads.ddp_steps --steps 100 --width "$width" --slow-rank 1 --slow-by "$by"
    done
fi
gzip -f "$work"/*.json 2>/dev/null
tar -C "$work" -czf "$out/indirect_$what.tgz" .
ls -la "$work" "$out"
