#!/usr/bin/env bash
# Issue 35, where the trivial CUDA program's fixed cost under record goes (device tool, .whl
# carried; ~3 min): bench/record_phases.py with torch's first CUDA tensor, bare, under record
# and with parts of record off, then one record run under cProfile and one record's summary.
set -uo pipefail
out=${OUT:-/tmp/record-phases}
mkdir -p "$out"
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 bench/record_phases.py --rounds "${ROUNDS:-3}" --json "$out/record_phases_gpu.json" \
    --variant "no GPU metrics=--no-gpu-metrics" --variant "no CPU=--no-cpu" \
    --variant "no GPU=--no-gpu" --profile "$out" "$@" 2>&1 | grep -v "^$" | head -90
python3 -m collector.cli record -o "$out/one.pftrace" -- \
    python3 -c 'import torch; torch.zeros(1, device="cuda")' 2>&1 | tail -30
