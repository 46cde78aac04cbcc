#!/usr/bin/env bash
# On the GPU machine (device tool, .whl carried): how the PM sampler's stop at the program's
# exit behaves (CUPTI's stop once never returned at a GPT-2 run's exit and held the program:
# bench/sampler_handlers_gpu.sh, docs/benchmarks.md).  Records GPT-2 training ROUNDS times
# (default 5) with the default GPU metrics (PM sampling) and prints, per round: wall time,
# exit status, the summary's PM sampling line, and whether a stop passed its deadline or a
# process lost its final flush; then the GPU phases workload once, its trace kept in $OUT
# (read it back here: the machine has no wasmtime).  It measured the stop moved to the PM
# thread (all GPT-2 runs crashed at exit; reverted) and serves for the next attempt.
#   . bench/device_deps.sh && bash bench/pm_final_stop_gpu.sh
set -u
out=${OUT:-/tmp/pm-final-stop}
work=/tmp/pm-final-stop-work
rounds=${ROUNDS:-5}
rm -rf "$work"; mkdir -p "$out" "$work"
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
printf '%-6s %7s %4s  %s\n' round wall rc "PM sampling / hung / lost final flush"
for round in $(seq 1 "$rounds"); do
    start=$(date +%s%N)
    timeout 280 python3 -m collector.cli record --no-cpu -o "$work/gpt2-$round.perfetto-trace" \
        -- python3 bench/workloads/gpt2_train.py 30 > "$work/gpt2-$round.out" 2>&1
    rc=$?
    wall=$(( ($(date +%s%N) - start) / 1000000000 ))
    pm=$(grep -oE 'PM sampling [0-9]+ samples, [0-9]+ dropped' "$work/gpt2-$round.out" | head -1)
    hung=$(grep -c 'did not stop' "$work/gpt2-$round.out")
    lost=$(grep -c 'without their final flush' "$work/gpt2-$round.out")
    printf '%-6s %6ss %4s  %s / %s / %s\n' "$round" "$wall" "$rc" "${pm:-none}" "$hung" "$lost"
done
timeout 120 env XPU_PERF_PM_DEBUG=1 python3 -m collector.cli record --no-cpu \
    -o "$out/phases.perfetto-trace" -- python3 -m bench.workloads.gpu_phases --seconds 3 \
    > "$work/phases.out" 2>&1
echo "phases rc=$?"; grep -E 'GPU metrics|final|did not stop' "$work/phases.out" | head -12
tail -5 "$work/gpt2-1.out"
