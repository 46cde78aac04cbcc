#!/usr/bin/env bash
# Issues 21 and 22 on a GPU machine (device tool, .whl carried): a torch.compile program and
# a DataLoader program with workers under `record` (every process's final data: the summary
# and the metadata counters), and a small GPT-2 training run whose trace comes back for
# bench/stack_depth.py here.  Traces land in $OUT.
set -uo pipefail
out=${OUT:-/tmp/faults-views}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
for p in compile loader; do
    echo "== $p $(date +%T)"
    python3 -m collector.commands.record --no-kernel-stacks -o "$out/$p.perfetto-trace" -- \
        python3 -m bench.workloads.worker_processes $p 2>&1 | grep -E "xpu-perf record|error|Traceback" | head -30
done
echo "== gpt2 $(date +%T)"
python3 -m collector.commands.record --no-kernel-stacks -o "$out/gpt2.perfetto-trace" -- \
    python3 -m bench.workloads.gpt2_train 40 2>&1 | grep -E "xpu-perf record|gpt2:|error" | head -20
ls -la "$out"
