#!/usr/bin/env bash
# Headless browser for the `view` / `report` browser tests: Debian's chromium (as root),
# driven over the Chrome DevTools Protocol with websocket-client from the venv.  Nothing is
# downloaded from outside the Debian and PyPI registries.  Idempotent; prints what it changed.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
say() { echo "setup_browser: $*"; }

if [ "$(id -u)" -ne 0 ]; then
    say "not root: cannot install Debian's chromium; run 'sudo bash scripts/setup_browser.sh'"
    exit 0
fi

# fonts-dejavu-core: chromium draws text (flamegraph labels, Perfetto track names) with it;
# without any font the screenshots show empty boxes.
need=()
for pkg in chromium fonts-dejavu-core; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
    say "chromium already installed: $(chromium --version 2>/dev/null || echo '?')"
fi

# The CDP client; also in pyproject's test extra, installed here so the script stands alone.
if [ -x .venv/bin/python ] && ! .venv/bin/python -c 'import websocket' 2>/dev/null; then
    say "installing websocket-client into .venv"
    .venv/bin/python -m pip install -q --disable-pip-version-check 'websocket-client>=1.6'
fi
