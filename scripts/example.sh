#!/usr/bin/env bash
# The main job on the bundled examples, offline:
# 1. `report` of a real recording (`xpu-perf record` on an NVIDIA H200) of a small training
#    program with a known problem (bench/workloads/example_train.py: its DataLoader workers
#    build each batch in Python): the findings (why the GPU waits, at which line, what to
#    change), the steps and the top tables.
# 2. `convert` of a real torch.profiler trace recorded on an H100
#    (bench/data/example_kineto.json.gz) to a Perfetto trace, and its findings.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# XPU_PERF_PYTHON: run the checkout's code with that interpreter (the tests), else the venv.
if [[ -n "${XPU_PERF_PYTHON:-}" ]]; then
  xp=("$XPU_PERF_PYTHON" -m collector.cli)
else
  xp=("$repo/.venv/bin/xpu-perf")
fi
out=${1:-example.perfetto-trace}
recorded=$repo/bench/data/example_recorded.perfetto-trace
shown=${recorded#"$PWD/"}  # as the user would type it, from where they are
echo "A recording of bench/workloads/example_train.py on an NVIDIA H200 (xpu-perf record):"
echo
"${xp[@]}" report "$recorded"
echo
echo "A PyTorch profiler trace (torch.profiler on an H100), converted:"
"${xp[@]}" convert "$repo/bench/data/example_kineto.json.gz" -o "$out" -q
echo "converted bench/data/example_kineto.json.gz -> $out"
echo
# The findings section only: from its heading to the blank line after it.
"${xp[@]}" report "$out" | awk '/^Findings/ { on = 1 } on && /^$/ { exit } on'
echo
echo "the rest of its report: xpu-perf report $out"
echo "the recording as one HTML page with a flamegraph, and its timeline served offline:"
echo "  xpu-perf report $shown -o report.html"
echo "  xpu-perf view $shown"
