#!/usr/bin/env bash
# Issue 22 part 4 (names) on a GPU machine (device tool, .whl carried): the DataLoader and
# torch.compile programs of bench/workloads/worker_processes.py under `record`, then the
# process and thread names of their traces as the Perfetto UI reads them, checked for the
# workers' roles ("DataLoader worker N (python3)", "inductor compile worker ...").  The
# threads' Python names are printed too.  With DEB_DIR set (bcc .debs, see
# bench/device_bcc_env.sh) the same with the eBPF CPU sampler.  Traces and logs land in $OUT.
set -uo pipefail
out=${OUT:-/tmp/names}
mkdir -p "$out"
exec > >(tee "$out/log.txt") 2>&1
. bench/device_deps.sh
python3 -m collector.inject_build >/dev/null
samplers=inprocess
if [ -n "${DEB_DIR:-}" ]; then . bench/device_bcc_env.sh "$DEB_DIR" && samplers="inprocess ebpf"; fi
status=0
for sampler in $samplers; do
    for p in loader compile; do
        echo "== $p ($sampler) $(date +%T)"
        trace="$out/$p-$sampler.perfetto-trace"
        timeout 280 python3 -m collector.commands.record --no-kernel-stacks --cpu-sampler "$sampler" \
            -o "$trace" -- python3 -m bench.workloads.worker_processes $p > "$out/$p-$sampler.stderr" 2>&1
        echo "record rc=$?"
        grep -E "xpu-perf record: (wrote|error)|Traceback" "$out/$p-$sampler.stderr" | head -5
        if [ $p = loader ]; then expect="DataLoader worker"; else expect="inductor compile worker"; fi
        python3 bench/names_report.py "$trace" --expect "$expect" || status=1
    done
done
echo "names check: $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
