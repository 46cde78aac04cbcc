#!/usr/bin/env bash
# The main job on the bundled example: a real torch.profiler trace recorded on an H100
# (bench/data/example_kineto.json.gz) -> Perfetto trace -> top kernels -> folded stacks.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
xp="$repo/.venv/bin/xpu-perf"
out=${1:-example.perfetto-trace}
"$xp" convert "$repo/bench/data/example_kineto.json.gz" -o "$out"
echo "== top GPU kernels =="
"$xp" query "$out" "select name, count(*) as n, sum(dur) as total_ns from slice
  where category = 'kernel' group by name order by total_ns desc limit 5"
echo "== folded stacks (gpu mode, ns), heaviest 5 =="
"$xp" folded "$out" --mode gpu --unit ns | awk '{w = $NF; $NF = ""; print w "\t" substr($0, 1, 140)}' | sort -nr | awk 'NR <= 5'
echo "open $out in https://ui.perfetto.dev"
