#!/usr/bin/env bash
# Builds the CPython minors Debian 12 does not ship (3.13, 3.14) from Debian's own source
# packages, for the tests of Python frames in CPU samples and launch stacks.  Debian 13's
# binary .debs need a newer glibc, so the upstream tarball inside the source package is
# built here instead: `apt-get source --download-only` from deb-src lines for trixie
# (python3.13) and sid (python3.14) on the mirror apt already uses, then a plain
# `./configure && make` (no PGO: the tests need the interpreter, not its speed).
# Each build lands in ~/.cache/xpu-perf/cpython/<minor>/ and is reused while its
# `python` runs; set XPU_PERF_CPYTHONS="3.13 3.14" to choose.  Root only (apt-get).
set -euo pipefail
say() { echo "build_cpythons: $*"; }
cache=${XDG_CACHE_HOME:-$HOME/.cache}/xpu-perf/cpython
minors=${XPU_PERF_CPYTHONS:-"3.13 3.14"}
[ "$(id -u)" -eq 0 ] || { say "not root: skipped (apt-get needs root)"; exit 0; }

declare -A suite=([3.13]=trixie [3.14]=sid [3.15]=sid)
todo=()
for m in $minors; do
    if [ -x "$cache/$m/bin/python$m" ] && "$cache/$m/bin/python$m" -c pass 2>/dev/null; then
        say "python$m cached at $cache/$m"
    else
        todo+=("$m")
    fi
done
[ ${#todo[@]} -gt 0 ] || exit 0

# Build dependencies of a minimal interpreter (ctypes, ssl and the rest are not needed).
need=()
for pkg in build-essential pkg-config zlib1g-dev libffi-dev libexpat1-dev xz-utils dpkg-dev; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null \
         | grep -E '^(URIs:|deb )' | grep -oE 'https?://[^ ]+/debian/?' | grep -v security | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
build_minor() {
    local m=$1 src="$work/src-$1"
    say "building python$m from Debian's python$m source package (several minutes)"
    # One private apt configuration per minor, holding only the deb-src line of its suite,
    # so the machine's own sources and package lists are left as they are.
    mkdir -p "$src/lists/partial" "$src/cache/archives/partial"
    echo "deb-src [trusted=yes] $mirror ${suite[$m]} main" > "$src/sources.list"
    local opts=(-o Dir::Etc::SourceList="$src/sources.list" -o Dir::Etc::SourceParts=/dev/null
                -o Dir::State::Lists="$src/lists" -o Dir::Cache="$src/cache")
    apt-get "${opts[@]}" update -qq 2>/dev/null || return 1
    (cd "$src" && apt-get "${opts[@]}" source --download-only -qq "python$m" >/dev/null 2>&1) || return 1
    local tarball dir
    tarball=$(ls "$src"/python"$m"_*.orig.tar.* 2>/dev/null | head -1)
    [ -n "$tarball" ] || return 1
    tar -C "$src" -xf "$tarball"
    dir=$(find "$src" -maxdepth 1 -type d -name 'Python-*' | head -1)
    (cd "$dir" && ./configure -q --prefix="$cache/$m" --without-ensurepip >/dev/null \
        && make -s -j"$(nproc)" >/dev/null 2>&1 && make -s install >/dev/null 2>&1) || return 1
    "$cache/$m/bin/python$m" -c 'import sys; print("build_cpythons:", sys.version.split()[0], "ready")'
}

# A minor whose source the mirror does not serve is reported and skipped: its tests say so.
for m in "${todo[@]}"; do
    build_minor "$m" || say "python$m could not be built (its source package was not served); tests of it are skipped"
done
