#!/usr/bin/env bash
# Make bcc (eBPF via Debian's python3-bpfcc) usable by xpu-perf on Debian 12, as root.
#
# Idempotent.  Prints one line per thing it changed and nothing when all was already in
# place; exits non-zero with the reason when something cannot be fixed.  It:
#   1. installs python3-bpfcc and linux-headers-amd64 (bcc compiles BPF C against headers);
#   2. links /lib/modules/$(uname -r)/{build,source} to the Debian headers when the running
#      kernel ships none (cloud / VM kernels often don't; the 6.1 headers compile fine for
#      the programs in bpf/, which only use stable UAPI and helper definitions);
#   3. makes the `bcc` module importable in the project's venv by a symlink to Debian's copy
#      (PyPI's `bcc` is an unrelated package and must never be installed);
#   4. mounts tracefs, which bcc needs to create and cleanly remove uprobes.
# Environment: VENV (default: <repo>/.venv), XPU_PERF_SKIP_APT=1 to skip apt (checks only).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${VENV:-$repo/.venv}
kver=$(uname -r)
say() { echo "setup_bcc: $*"; }
die() { echo "setup_bcc: error: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (try: sudo $0)"

# 1. packages ---------------------------------------------------------------------------
missing=()
for pkg in python3-bpfcc linux-headers-amd64; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    [ "${XPU_PERF_SKIP_APT:-0}" = 1 ] && die "missing packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    log=$(mktemp)
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >"$log" 2>&1; then
        cat "$log" >&2; rm -f "$log"; die "apt-get install ${missing[*]} failed"
    fi
    rm -f "$log"
    say "installed ${missing[*]}"
fi

# 2. kernel headers where bcc looks for them ----------------------------------------------
moddir=/lib/modules/$kver
# Newest Debian header tree: linux-headers-<ver>-amd64 (build) + linux-headers-<ver>-common (source).
hdr_build=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n1 || true)
hdr_source=${hdr_build%-amd64}-common
link_headers() {  # $1 = name under $moddir, $2 = target directory
    local name=$1 target=$2
    if [ -e "$moddir/$name" ]; then return; fi           # the kernel ships its own: keep it
    [ -d "$target" ] || die "no header tree at $target (is linux-headers-amd64 installed?)"
    mkdir -p "$moddir"
    if [ -L "$moddir/$name" ]; then rm -f "$moddir/$name"; fi  # dangling link from older headers
    ln -s "$target" "$moddir/$name"
    say "linked $moddir/$name -> $target"
}
link_headers build "$hdr_build"
link_headers source "$hdr_source"

# 3. bcc inside the venv ------------------------------------------------------------------
debian_bcc=/usr/lib/python3/dist-packages/bcc
[ -d "$debian_bcc" ] || die "$debian_bcc missing (python3-bpfcc not installed?)"
if [ -x "$venv/bin/python" ]; then
    site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    if [ "$(readlink "$site/bcc" 2>/dev/null)" != "$debian_bcc" ]; then
        [ -e "$site/bcc" ] && [ ! -L "$site/bcc" ] && die "$site/bcc exists and is not Debian's bcc (PyPI's 'bcc' is unrelated: pip uninstall bcc)"
        ln -sfn "$debian_bcc" "$site/bcc"
        say "linked $site/bcc -> $debian_bcc"
    fi
else
    say "no venv at $venv: skipped linking bcc into it (set VENV=...)"
fi

# 4. tracefs ------------------------------------------------------------------------------
if ! grep -qs ' /sys/kernel/tracing tracefs ' /proc/mounts; then
    mount -t tracefs nodev /sys/kernel/tracing || die "cannot mount tracefs on /sys/kernel/tracing"
    say "mounted tracefs on /sys/kernel/tracing"
fi
# Older bcc code paths use /sys/kernel/debug/tracing; debugfs exposes tracefs there.
if ! grep -qs ' /sys/kernel/debug debugfs ' /proc/mounts; then
    if mount -t debugfs nodev /sys/kernel/debug 2>/dev/null; then
        say "mounted debugfs on /sys/kernel/debug"
    fi
fi

# 5. smoke test: compile and load a trivial program ---------------------------------------
py=python3
[ -x "$venv/bin/python" ] && py=$venv/bin/python
if ! err=$("$py" - 2>&1 <<'PY'
from bcc import BPF
BPF(text="int probe(void *ctx) { return 0; }").load_func("probe", BPF.PERF_EVENT)
PY
); then
    echo "$err" >&2
    die "bcc cannot compile/load a BPF program with $py"
fi
