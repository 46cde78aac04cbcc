#!/usr/bin/env bash
# Issue 25 on a GPU machine (device tool, .whl carried): a training loop with its own
# torch.profiler schedule (bench/workloads/profiled_steps.py: wait 5, warmup 3, active 10,
# repeat 2, then plain steps) with and without `record`:
#   bare_none     the loop alone                       bare_prof    its profiler, no record
#   rec_none      record, no profiler in the loop      rec_serve    record, its profiler served
#   rec_refuse    record --program-profiler refuse     rec_window   record --capture-range
#                                                                   torch-profiler
# record runs with --no-cpu (the GPU side is what coexists) and keeps its streams, which
# bench/coexist_report.py reads with the Kineto traces.  First the facts: which libcupti torch
# loads and how libtorch_cuda binds CUPTI, what CUPTI answers a second cuptiSubscribe, what
# Kineto prints when refused.  ROUNDS (default 2) interleaved rounds for the step times.
#   bash bench/coexist_gpu.sh [ROUNDS]
set -uo pipefail
rounds=${1:-2}
out=${OUT:-/tmp/coexist}
runs=$(mktemp -d)
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build
echo "== facts $(date +%T)"
timeout 60 python3 bench/cupti_facts.py
# A run that hangs is cut at 150 s (its rc says 124); the others still run.
wl=(timeout 150 python3 -m bench.workloads.profiled_steps --steps 300)
rec=(timeout 150 python3 -m collector.commands.record --no-cpu)
one() {  # NAME ROUND [record flags... --] workload flags...
    local name=$1 r=$2; shift 2
    local prefix="$runs/$name"
    rm -rf "$prefix.streams" "$prefix".k.*.json
    case $name in
    bare_none) "${wl[@]}" --no-profiler --trace-prefix "$prefix.k" ;;
    bare_prof) "${wl[@]}" --trace-prefix "$prefix.k" ;;
    rec_none) "${rec[@]}" --keep-streams "$prefix.streams" -o "$runs/$name.perfetto-trace" -- \
        "${wl[@]}" --no-profiler --trace-prefix "$prefix.k" ;;
    rec_serve) "${rec[@]}" --keep-streams "$prefix.streams" -o "$runs/$name.perfetto-trace" -- \
        "${wl[@]}" --trace-prefix "$prefix.k" ;;
    rec_refuse) "${rec[@]}" --program-profiler refuse --keep-streams "$prefix.streams" \
        -o "$runs/$name.perfetto-trace" -- "${wl[@]}" --trace-prefix "$prefix.k" ;;
    rec_window) "${rec[@]}" --capture-range torch-profiler --keep-streams "$prefix.streams" \
        -o "$runs/$name.perfetto-trace" -- "${wl[@]}" --trace-prefix "$prefix.k" ;;
    esac > "$prefix.stdout" 2> "$prefix.stderr"
    echo "$name round $r rc=$?"
}
names=(bare_none bare_prof rec_none rec_serve rec_refuse rec_window)
for r in $(seq 1 "$rounds"); do
    echo "== round $r $(date +%T)"
    for n in "${names[@]}"; do one "$n" "$r"; done
    python3 bench/coexist_report.py "$runs" "${names[@]}" | head -8
done
echo "== what each run said (the last round)"
for n in "${names[@]}"; do
    echo "-- $n"
    grep -iE "xpu-perf|cupti|kineto|error|Traceback|Unexpected" "$runs/$n.stderr" | head -25
done
echo "== report (the last round)"
python3 bench/coexist_report.py "$runs" "${names[@]}"
cp "$runs/results.json" "$out/"
cp "$runs/rec_serve.perfetto-trace" "$runs/rec_window.perfetto-trace" "$out/" 2>/dev/null
gzip -c "$runs/rec_serve.k.0.json" > "$out/rec_serve.kineto.0.json.gz" 2>/dev/null
gzip -c "$runs/bare_prof.k.0.json" > "$out/bare_prof.kineto.0.json.gz" 2>/dev/null
