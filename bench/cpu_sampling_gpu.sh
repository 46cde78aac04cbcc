#!/usr/bin/env bash
# CPU sampling on a GPU machine (run there through the device tool, with .whl carried):
# the launch-bound PyTorch training step recorded with everything on, CPU sampling off
# (--no-cpu), at 99 Hz and at 999 Hz, and under py-spy at 99 Hz, interleaved round by round so
# drift hits every mode alike.  Prints one line per run ("MODE ROUND ms/step") and keeps the
# last round's traces (and py-spy's raw stacks) in $OUT for bench/cpu_sampling_report.py,
# which computes the stack-quality figures on this machine through trace_processor.
#
#   bash bench/cpu_sampling_gpu.sh [ROUNDS] [STEPS]
set -uo pipefail
rounds=${1:-5}
steps=${2:-300}
out=${OUT:-/tmp/cpu-sampling}
mkdir -p "$out"
# .whl: pip download --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64
#   -d .whl perfetto protobuf deflate pyelftools cxxfilt ijson rich py-spy  (on this machine)
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
workload=(python3 -m bench.workloads.launch_bound --steps "$steps" --warmup 30)
step_ms() { grep -oE '[0-9.]+ ms/step' | tail -1 | cut -d' ' -f1; }
for r in $(seq 1 "$rounds"); do
    echo "plain $r $("${workload[@]}" 2>&1 | step_ms)"
    for mode in no_cpu cpu99 cpu999; do
        case $mode in
            no_cpu) flags=(--no-cpu) ;;
            cpu99) flags=(--freq 99) ;;
            cpu999) flags=(--freq 999) ;;
        esac
        trace="$out/$mode.perfetto-trace"
        log=$(python3 -m collector.commands.record "${flags[@]}" -o "$trace" -- "${workload[@]}" 2>&1)
        echo "$mode $r $(echo "$log" | step_ms)"
        if [ "$r" = "$rounds" ]; then echo "$log" | grep 'xpu-perf record' > "$out/$mode.summary.txt"; fi
    done
    spy_out="$out/pyspy99.txt"
    log=$(py-spy record --rate 99 --format raw --output "$spy_out" --nonblocking -- "${workload[@]}" 2>&1)
    echo "pyspy99 $r $(echo "$log" | step_ms)"
done
rm -f "$out/cpu999.perfetto-trace"
ls -la "$out"
