#!/usr/bin/env bash
# Capture windows on a GPU machine (device tool, .whl carried): a 3,000-step launch-bound run
# with a window around 50 steps (steps 1000-1049), interleaved round by round:
#   plain        the run alone
#   xpu_window   record --capture-range cudaProfilerApi, the window opened
#   xpu_never    the same, the window never opened (no profiler start/stop call)
#   torch_sched  torch.profiler with schedule(wait=999, warmup=1, active=50)
# record runs as users run it (CPU sampling on, paused outside the windows), without the
# eBPF kernel-stack sampler (--no-kernel-stacks: this script sets up no bcc, and the
# sampler followed no windows when docs/benchmarks.md's runs were taken).  Before the
# rounds (a run cut by the time limit keeps them), one run each of the other window
# triggers, traces kept for their checks:
#   xpu_nvtx     --capture-range nvtx:window (an NVTX range pushed around the 50 steps)
#   xpu_signal   --capture-range signal (the workload sends SIGUSR2 to record around them)
# Prints "MODE ROUND ms-per-run-step median-ms" lines and the summaries; records 120 whole
# steps to count kernels per step.  Traces land in $OUT.
#   bash bench/capture_window_gpu.sh [ROUNDS]
set -uo pipefail
rounds=${1:-4}
out=${OUT:-/tmp/capture-window}
sums=$(mktemp -d)  # the summaries go into the log: the device returns at most 8 files
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
run=(python3 -m bench.workloads.windowed --steps 3000 --first 1000 --window 50)
rec=(python3 -m collector.commands.record --no-kernel-stacks)
line() { grep -oE 'windowed [a-z_]+: [0-9.]+ ms/run-step, median [0-9.]+' | tail -1; }
for trigger in nvtx signal; do
    echo "== starting $trigger $(date +%T)"
    range=$([ "$trigger" = nvtx ] && echo nvtx:window || echo signal)
    log=$("${rec[@]}" --capture-range "$range" -o "$out/$trigger.perfetto-trace" -- \
        "${run[@]}" --mode "$trigger" 2>&1)
    echo "xpu_$trigger 1 $(echo "$log" | line)"
    echo "$log" | grep 'xpu-perf record' > "$sums/$trigger.summary.txt"
done
python3 -m collector.commands.record --no-cpu -o "$out/full120.perfetto-trace" -- \
    python3 -m bench.workloads.windowed --steps 100 --first 5000 --window 1 --mode never \
    2>&1 | grep 'records:' > "$sums/full120.summary.txt"
for r in $(seq 1 "$rounds"); do
    echo "plain $r $("${run[@]}" --mode never 2>&1 | line)"
    log=$("${rec[@]}" --capture-range cudaProfilerApi -o "$out/window.perfetto-trace" -- \
        "${run[@]}" --mode cuda_profiler 2>&1)
    echo "xpu_window $r $(echo "$log" | line)"
    echo "$log" | grep 'xpu-perf record' > "$sums/window.summary.txt"
    echo "xpu_never $r $("${rec[@]}" --capture-range cudaProfilerApi -o "$out/never.perfetto-trace" \
        -- "${run[@]}" --mode never 2>&1 | line)"
    echo "torch_sched $r $("${run[@]}" --mode torch_profiler --trace "$out/torch.json" 2>&1 | line)"
done
rm -f "$out/never.perfetto-trace" "$out/torch.json"
for f in window nvtx signal full120; do echo "== $f"; cat "$sums/$f.summary.txt"; done
