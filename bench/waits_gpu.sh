#!/usr/bin/env bash
# Blocked time on a GPU machine (device tool, .whl carried): a training loop whose DataLoader
# workers (num_workers=2) are slower than the GPU step, and a loop that sleeps between
# launches, under `record` (default --wait-threshold 100 us).  For each: the GPU-idle time
# of the active span and how much of it the launching thread spent inside `wait` slices, the
# top waits by call and Python line, the summary's waits line, and the launch-bound loop's
# wall time with capture off against on (--wait-threshold 0), 3 interleaved rounds.
# Traces, logs and waits_h200.json land in $OUT.
set -uo pipefail
out=${OUT:-/tmp/waits-gpu}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
cat > /tmp/waits_loader.py <<'PY'
import time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self): return 64 * 30
    def __getitem__(self, i):
        t = time.process_time() + 0.004  # 4 ms of Python per sample: the workers are slow
        x = 0
        while time.process_time() < t: x += 1
        return torch.full((256,), float(i))
model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)]).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for batch in DataLoader(Slow(), batch_size=64, num_workers=2):
    loss = model(batch.cuda()).square().mean()  # LOSS_LINE
    loss.backward(); opt.step(); opt.zero_grad()
torch.cuda.synchronize()
PY
cat > /tmp/waits_sleep.py <<'PY'
import sys, time, torch
x = torch.randn(512, 512, device="cuda")
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 200):
    for _ in range(20): x = torch.tanh(x @ x)  # launch-bound: 40 small kernels
    torch.cuda.synchronize()
    time.sleep(0.002)  # SLEEP_LINE
PY
cat > /tmp/waits_query.py <<'PY'
import json, sys
from exporters.perfetto.engine.trace_processor import open_trace
from exporters.perfetto.engine.views import load_views
trace, name = sys.argv[1], sys.argv[2]
with open_trace(trace) as t:
    load_views(t)
    span = t.query("select min(ts) as s, max(ts + dur) as e from xpu_gpu_op")[0]
    busy = t.scalar("select sum(dur) from xpu_gpu_op where category = 'kernel'") or 0
    launcher = t.scalar("select s.utid from xpu_thread_slice s where s.category = 'cuda_api' "
                        "group by s.utid order by count(*) desc limit 1")
    waits = t.query(f"select ts, dur, call, callsite_id from xpu_wait where utid = {launcher} "
                    f"and ts + dur > {span['s']} and ts < {span['e']}")
    in_wait = sum(min(w['ts'] + w['dur'], span['e']) - max(w['ts'], span['s']) for w in waits)
    top = t.query(
        "select call, count(*) as n, sum(dur) / 1e6 as ms from xpu_wait "
        f"where utid = {launcher} group by call order by ms desc limit 8")
    errors = t.scalar("select count(*) from stats where severity in ('error','data_loss') and value > 0")
    res = {"span_ms": (span['e'] - span['s']) / 1e6, "gpu_busy_ms": busy / 1e6,
           "launcher_waiting_ms": in_wait / 1e6, "waits_on_launcher": len(waits),
           "top_calls": top, "stats_errors": errors}
    print(name, json.dumps(res, indent=1))
    json.dump(res, open(sys.argv[3], "w"))
PY
for p in loader sleep; do
    echo "== $p $(date +%T)"
    timeout 280 python3 -m collector.commands.record -o "$out/$p.perfetto-trace" -- \
        python3 /tmp/waits_$p.py > "$out/$p.stderr" 2>&1
    echo "rc=$?"; grep -E "blocked calls|cpu samples:" "$out/$p.stderr"
    python3 /tmp/waits_query.py "$out/$p.perfetto-trace" "$p" "$out/$p.json"
    python3 -m collector.cli report "$out/$p.perfetto-trace" 2>&1 | head -40 > "$out/$p.report.txt"
done
# The launch-bound loop's wall time, capture off (--wait-threshold 0) against on, interleaved.
for round in 1 2 3; do
    for th in 0 100; do
        t0=$(date +%s.%N)
        python3 -m collector.commands.record --wait-threshold $th -q -o "$out/cost_$th.perfetto-trace" -- \
            python3 /tmp/waits_sleep.py 300 > /dev/null 2>&1
        echo "round $round threshold $th: wall=$(python3 -c "import time;print(round(time.time()-$t0,2))") s"
    done
done | tee "$out/cost.txt"
python3 - "$out" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
res = {p: json.loads((out / f"{p}.json").read_text()) for p in ("loader", "sleep") if (out / f"{p}.json").exists()}
res["cost_rounds"] = (out / "cost.txt").read_text().splitlines()
(out / "waits_h200.json").write_text(json.dumps(res, indent=1))
PY
