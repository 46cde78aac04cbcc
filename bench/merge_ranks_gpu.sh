#!/usr/bin/env bash
# Two "nodes" on one 2-GPU machine (device tool, kind nvidia-h200-x2): a torchrun DDP job of
# 2 ranks started as two torchrun invocations (--nnodes=2, one rank each, GPU 0 and GPU 1),
# each wrapped by its own `xpu-perf record`, so each rank is a trace of its own as on two
# nodes.  Then: merge (clock alignment, then --align nccl), the NCCL end spread before and
# after (from the merge summary/metadata), every NCCL kernel of both inputs present in the
# merged trace, and the per-rank table.  Traces and log land in $OUT.
#   bash bench/merge_ranks_gpu.sh [STEPS]
set -uo pipefail
steps=${1:-200}
out=${OUT:-/tmp/merge-ranks}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
port=$((29500 + RANDOM % 1000))
for k in 0 1; do
    CUDA_VISIBLE_DEVICES=$k python3 -m collector.cli record --no-kernel-stacks \
        -o "$out/node$k.perfetto-trace" -- \
        torchrun --nnodes=2 --nproc-per-node=1 --node-rank=$k \
        --master-addr=127.0.0.1 --master-port=$port \
        -m bench.workloads.ddp_steps --steps "$steps" > "$out/record$k.txt" 2>&1 &
done
wait
cat "$out/record0.txt" "$out/record1.txt" | grep -E 'ddp_steps|xpu-perf record|error' || true
python3 -m collector.cli merge -o "$out/clock.perfetto-trace" "$out"/node{0,1}.perfetto-trace
python3 -m collector.cli merge --align nccl -o "$out/merged.perfetto-trace" \
    "$out"/node{0,1}.perfetto-trace
q() { python3 -m collector.cli query --format csv "$@"; }
echo "== NCCL kernels per input, alone and merged"
for k in 0 1; do q "$out/node$k.perfetto-trace" "select count(*) as nccl from xpu_nccl_kernel"; done
q "$out/merged.perfetto-trace" \
    "select p.rank, p.host, count(*) as nccl from xpu_nccl_kernel k join slice a on a.id = k.api_id
     join thread_track tt on tt.id = a.track_id join thread using (utid)
     join xpu_process p using (upid) group by p.rank, p.host"
echo "== alignment (ns)"
q "$out/merged.perfetto-trace" \
    "select key, int_value from xpu_metadata where key like 'merge_nccl%' or key like 'merge_input%offset%'
     or key like 'merge_input%clock_source'"
q "$out/merged.perfetto-trace" \
    "select count(*) as errors from stats where severity in ('error', 'data_loss') and value > 0"
echo "== per rank"
python3 -m collector.cli report --ranks "$out/merged.perfetto-trace" --steps step
rm -f "$out/clock.perfetto-trace"
