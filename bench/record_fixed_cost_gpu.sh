#!/usr/bin/env bash
# Issue 35, "record's fixed cost", on the lent GPU (device tool, .whl carried; ~5 min): a
# trivial CUDA program (torch's first CUDA tensor) and a 5 s Python loop, bare and under
# record (everything on; as root with bcc also the eBPF variants), interleaved rounds,
# medians (bench/record_fixed_cost.py).  The JSON comes back in $OUT; the table is printed.
# Before/after: carry main's checkout too and add --compare main=DIR.
set -uo pipefail
out=${OUT:-/tmp/record-fixed-cost}
mkdir -p "$out"
. bench/device_deps.sh
# As root with bcc (the eBPF variants): BCC_DEBS=<carried .deb folder> (bench/device_bcc_env.sh).
[ -n "${BCC_DEBS:-}" ] && . bench/device_bcc_env.sh "$BCC_DEBS"
python3 -m collector.inject_build >/dev/null || echo "inject build failed"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 bench/record_fixed_cost.py --rounds 5 --label gpu --json "$out/record_fixed_cost_gpu.json" \
    --program "trivial CUDA=python3 -c 'import torch; torch.zeros(1, device=\"cuda\")'" \
    --program "5 s loop=python3 -c 'import time
end = time.monotonic() + 5
while time.monotonic() < end: pass'" "$@"
