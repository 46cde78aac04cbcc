#!/usr/bin/env bash
# On the GPU machine (device tool, .whl carried): catch the hang at exit seen once in three
# GPT-2 recordings (the exiting thread inside CUPTI's PM sampler stop,
# NVPW_GPU_PeriodicSampler_StopSampling; docs/benchmarks.md) with every thread's stack.
# Records GPT-2 training up to ROUNDS times (default 8) with record's defaults; a round still
# running after HANG_S seconds (default 75; a round takes ~20 s) is taken as hung: each
# python3 process of the target gets `py-spy dump --native` (all threads), its threads'
# kernel wait channels, then it is killed.  Writes $OUT/hang.txt; prints a table per round.
#   . bench/device_deps.sh && bash bench/pm_exit_hang_gpu.sh
set -u
out=${OUT:-/tmp/pm-exit-hang}
work=/tmp/pm-exit-hang-work
rounds=${ROUNDS:-8}
hang_s=${HANG_S:-75}
rm -rf "$work"; mkdir -p "$out" "$work"
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
printf '%-6s %6s %4s  %s\n' round wall rc "PM sampling line / lost final flush / kernel sampler"
for round in $(seq 1 "$rounds"); do
    start=$(date +%s)
    python3 -m collector.cli record -o "$work/gpt2-$round.perfetto-trace" \
        -- python3 bench/workloads/gpt2_train.py 30 > "$work/gpt2-$round.out" 2>&1 &
    rec=$!
    while kill -0 "$rec" 2>/dev/null && [ $(( $(date +%s) - start )) -lt "$hang_s" ]; do sleep 1; done
    if kill -0 "$rec" 2>/dev/null; then
        {
            echo "== round $round hung after ${hang_s}s"
            for pid in $(pgrep -f "bench/workloads/gpt2_train.py" | grep -v "^$rec$"); do
                echo "-- pid $pid: $(tr '\0' ' ' < /proc/$pid/cmdline | cut -c1-120)"
                for task in /proc/$pid/task/*; do
                    echo "   task ${task##*/} $(cat "$task/comm") wchan=$(cat "$task/wchan" 2>/dev/null) state=$(awk '{print $3}' "$task/stat")"
                done
                timeout 60 py-spy dump --native --pid "$pid" 2>&1 | head -400
            done
        } >> "$out/hang.txt" 2>&1
        pkill -9 -f "bench/workloads/gpt2_train.py"; wait "$rec"
        rc=hung
    else
        wait "$rec"; rc=$?
    fi
    pm=$(grep -oE 'PM sampling [0-9]+ samples, [0-9]+ dropped' "$work/gpt2-$round.out" | head -1)
    lost=$(grep -c 'without their final flush' "$work/gpt2-$round.out")
    kernel=$(grep -oE 'cpu samples in the kernel: [^(]*' "$work/gpt2-$round.out" | head -1)
    printf '%-6s %5ss %4s  %s / %s / %s\n' "$round" $(( $(date +%s) - start )) "$rc" "${pm:-none}" \
        "$lost" "${kernel:-no kernel-sampler line}"
    [ "$rc" = hung ] && break
done
tail -3 "$work/gpt2-1.out"
[ -f "$out/hang.txt" ] && head -c 6000 "$out/hang.txt"
