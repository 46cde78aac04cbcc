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
python3 - <<'PY'
import ctypes, os, subprocess
import torch
from collector.inject_build import find_cupti
print("torch", torch.__version__, "cuda", torch.version.cuda)
print("build finds CUPTI:", find_cupti())
tc = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
needed = subprocess.run(["readelf", "-d", tc], capture_output=True, text=True).stdout
print("libtorch_cuda NEEDED cupti:", [l.split()[-1] for l in needed.splitlines() if "cupti" in l])
undef = subprocess.run(["nm", "-D", "--undefined-only", tc], capture_output=True, text=True).stdout
print("libtorch_cuda undefined cupti* symbols:", sum("cupti" in l for l in undef.splitlines()))
torch.ones(1, device="cuda")
maps = sorted({l.split()[-1] for l in open("/proc/self/maps") if "cupti" in l})
print("libcupti mapped after CUDA init:", maps)
lib = ctypes.CDLL(maps[0] if maps else str(find_cupti().lib_dir / "libcupti.so.13"))
CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p)
cb = CB(lambda *a: None)
h1, h2 = ctypes.c_void_p(), ctypes.c_void_p()
r1 = lib.cuptiSubscribe(ctypes.byref(h1), cb, None)
r2 = lib.cuptiSubscribe(ctypes.byref(h2), cb, None)
print(f"cuptiSubscribe: first {r1}, second {r2} (39 = MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)")
lib.cuptiUnsubscribe(h1)
PY
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
    grep -iE "xpu-perf|cupti|kineto|error|Traceback" "$runs/$n.stderr" | grep -v "^\[W" | head -20
done
echo "== report (the last round)"
python3 bench/coexist_report.py "$runs" "${names[@]}"
cp "$runs/results.json" "$out/"
cp "$runs/rec_serve.perfetto-trace" "$runs/rec_window.perfetto-trace" "$out/" 2>/dev/null
gzip -c "$runs/rec_serve.k.0.json" > "$out/rec_serve.kineto.0.json.gz" 2>/dev/null
gzip -c "$runs/bare_prof.k.0.json" > "$out/bare_prof.kineto.0.json.gz" 2>/dev/null
