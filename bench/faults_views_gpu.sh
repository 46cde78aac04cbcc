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
cat > /tmp/compile_check.py <<'PY'
import torch
@torch.compile
def f(x): return torch.nn.functional.gelu(x @ x).sum()
x = torch.randn(2048, 2048, device="cuda")
for _ in range(30): f(x)
torch.cuda.synchronize()
PY
cat > /tmp/loader_check.py <<'PY'
import torch
from torch.utils.data import DataLoader, TensorDataset
dl = DataLoader(TensorDataset(torch.randn(8192, 512)), batch_size=64, num_workers=4)
m = torch.nn.Linear(512, 512).cuda()
for _ in range(2):
    for (b,) in dl: m(b.cuda(non_blocking=True)).sum().backward()
torch.cuda.synchronize()
PY
for p in compile loader; do
    echo "== $p $(date +%T)"
    python3 -m collector.commands.record --no-kernel-stacks -o "$out/$p.perfetto-trace" -- \
        python3 /tmp/${p}_check.py 2>&1 | grep -E "xpu-perf record|error|Traceback" | head -30
done
echo "== gpt2 $(date +%T)"
python3 -m collector.commands.record --no-kernel-stacks -o "$out/gpt2.perfetto-trace" -- \
    python3 -m bench.workloads.gpt2_train 40 2>&1 | grep -E "xpu-perf record|gpt2:|error" | head -20
ls -la "$out"
