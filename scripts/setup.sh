#!/usr/bin/env bash
# One-step set-up on a fresh Debian 12 machine (as root): the venv with xpu-perf and its
# test tools, bcc for eBPF sampling, the CUPTI injection library, and the embedded
# trace_processor's compiled-module cache.  Idempotent; safe to re-run.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
say() { echo "setup: $*"; }

# Compilers for the injection library and the native test programs.
if [ "$(id -u)" -eq 0 ]; then
    need=()
    for pkg in gcc g++ binutils make; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
    done
    if [ ${#need[@]} -gt 0 ]; then
        say "installing ${need[*]}"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    fi
fi

if [ ! -x .venv/bin/python ]; then
    say "creating .venv"
    python3 -m venv .venv
fi
say "installing xpu-perf and test tools into .venv"
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[test]"

if [ "$(id -u)" -eq 0 ] && [ -x scripts/setup_bcc.sh ]; then
    bash scripts/setup_bcc.sh
else
    say "not root: skipping bcc (eBPF CPU sampling) set-up; run 'sudo bash scripts/setup_bcc.sh'"
fi

if [ "$(id -u)" -eq 0 ]; then bash scripts/setup_browser.sh; fi  # headless chromium for the browser tests
# CPythons newer than Debian 12's 3.11, for the Python-frame tests (cached after the first run).
if [ "$(id -u)" -eq 0 ]; then bash scripts/build_cpythons.sh; fi

if [ -f collector/inject_build.py ]; then
    say "building the CUPTI injection library and the CPU sampler"
    .venv/bin/python -m collector.inject_build
fi

# Compile trace_processor.wasm once (tens of seconds); later runs load the cached module.
.venv/bin/python -c "from exporters.perfetto.engine.wasm_engine import WasmTransport; WasmTransport()"
say "done"
