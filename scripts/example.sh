#!/usr/bin/env bash
# The main job on the bundled example: a real torch.profiler trace recorded on an H100
# (bench/data/example_kineto.json.gz) -> Perfetto trace -> `report`: the findings (why the
# GPU waits, at which line, what to change), the steps and the top tables.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# XPU_PERF_PYTHON: run the checkout's code with that interpreter (the tests), else the venv.
if [[ -n "${XPU_PERF_PYTHON:-}" ]]; then
  xp=("$XPU_PERF_PYTHON" -m collector.cli)
else
  xp=("$repo/.venv/bin/xpu-perf")
fi
out=${1:-example.perfetto-trace}
"${xp[@]}" convert "$repo/bench/data/example_kineto.json.gz" -o "$out" -q
echo "converted bench/data/example_kineto.json.gz -> $out"
echo
"${xp[@]}" report "$out"
echo
echo "the same as one HTML page with a flamegraph: xpu-perf report $out -o report.html"
echo "the timeline, served offline: xpu-perf view $out"
