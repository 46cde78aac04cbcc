#!/usr/bin/env bash
# Issue 21 on a GPU machine (device tool, .whl carried): processes forked from a parent that
# initialised CUDA (DataLoader workers, torch.compile's compile workers, os.fork children)
# must reach their final flush when they end through _exit.  Each child's exit time is
# printed; a child still alive after 8 s gets its native stack dumped (py-spy) before it is
# killed.  Then the torch.compile and DataLoader programs (bench/workloads/worker_processes.py)
# under `record`, timed, with record's summary.  Traces and logs land in $OUT.
set -uo pipefail
out=${OUT:-/tmp/fork-children}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
cat > /tmp/fork_check.py <<'PY'
import multiprocessing as mp, os, signal, subprocess, sys, time
import torch
x = torch.randn(1024, 1024, device="cuda"); (x @ x).sum().item()
def work(n):
    s = 0
    for i in range(n): s += i * i
    return s
kids = []
for i in range(3):
    pid = os.fork()
    if pid == 0:
        work(2_000_000); os._exit(0)
    kids.append(("os.fork", pid, time.time()))
ctx = mp.get_context("fork")
procs = [ctx.Process(target=work, args=(2_000_000,)) for _ in range(2)]
for p in procs: p.start(); kids.append(("mp.fork", p.pid, time.time()))
for how, pid, t0 in kids:
    deadline = t0 + 8
    while time.time() < deadline:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done: break
        time.sleep(0.05)
    else:
        print(f"child {pid} ({how}) still alive after 8 s: native stack:", flush=True)
        subprocess.run(["py-spy", "dump", "--native", "--pid", str(pid)])
        os.kill(pid, signal.SIGKILL); os.waitpid(pid, 0)
        continue
    print(f"child {pid} ({how}) ended after {time.time() - t0:.2f} s", flush=True)
PY
program() {  # the command line of check $1
    if [ "$1" = fork ]; then echo /tmp/fork_check.py; else echo "-m bench.workloads.worker_processes $1"; fi
}
for p in fork loader compile; do
    echo "== $p $(date +%T)"
    t0=$(date +%s.%N)
    timeout 280 python3 -m collector.commands.record --no-kernel-stacks -o "$out/$p.perfetto-trace" -- \
        python3 $(program $p) > "$out/$p.stderr" 2>&1
    echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s"
    grep -E "^child|xpu-perf record: .*(flush|processes|dropped)|still alive|Thread|^ +[a-zA-Z_].*\(" "$out/$p.stderr" | head -60
done
# the same programs without record: their wall time alone
for p in loader compile; do
    t0=$(date +%s.%N); python3 $(program $p) >/dev/null 2>&1
    echo "bare $p: wall=$(python3 -c "import time;print(round(time.time()-$t0,1))") s"
done
