#!/usr/bin/env bash
# On the GPU machine, as root with the eBPF kernel-mode sampler (so both the perf clock's
# SIGPROF and the eBPF sampler's SIGURG reach the program): real PyTorch programs recorded a
# few times each, and the CPU samples counted whose stack holds one of the in-process
# sampler's own handlers (none since each handler holds the other's signal back).
#   . bench/device_deps.sh && . bench/device_bcc_env.sh .debs && bash bench/sampler_handlers_gpu.sh
set -u
out=${OUT:-/tmp/sampler_handlers}
mkdir -p "$out"
python3 -m collector.inject_build >/dev/null
# Folding reads the trace with the embedded engine (wasmtime); where the machine has none,
# the traces under $out are folded on another machine by the same lines below.
python3 -c "import wasmtime" 2>/dev/null || echo "no wasmtime here: fold $out/*.perfetto-trace elsewhere" >&2
printf '%-14s %-5s %8s %8s %10s\n' program round samples kernel in_handler
for prog in gpt2_train launch_bound; do
    for round in 1 2 3; do
        trace="$out/$prog-$round.perfetto-trace"
        if [ "$prog" = gpt2_train ]; then cmd=(python3 bench/workloads/gpt2_train.py 30)
        else cmd=(python3 -m bench.workloads.launch_bound); fi
        timeout 280 python3 -m collector.commands.record -o "$trace" -- "${cmd[@]}" \
            > "$out/$prog-$round.stderr" 2>&1
        kernel=$(grep -oE 'cpu samples in the kernel: [0-9]+' "$out/$prog-$round.stderr" | grep -oE '[0-9]+$')
        python3 -m collector.cli folded "$trace" --mode cpu --unit samples --all-frames \
            > "$out/$prog-$round.folded" 2>> "$out/$prog-$round.stderr"
        awk -v p="$prog" -v r="$round" -v k="${kernel:-none}" '
            { n += $NF } /(^|;)(on_kernel_signal|on_sample_signal|take_sample)(;| )/ { h += $NF }
            END { printf "%-14s %-5s %8d %8s %10d\n", p, r, n, k, h }' "$out/$prog-$round.folded"
    done
done
