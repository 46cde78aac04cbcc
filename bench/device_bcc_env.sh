# Source this on the GPU machine (no package registry there) to make bcc usable from carried
# Debian 12 .debs:  . bench/device_bcc_env.sh DEB_DIR
# It unpacks python3-bpfcc, libbpfcc, LLVM/clang 14 and the Debian 6.1 kernel headers under
# /opt/xpu-bcc (never over /), links /lib/modules/$(uname -r)/{build,source} to those headers
# when the kernel ships none, mounts tracefs, and exports PYTHONPATH / LD_LIBRARY_PATH.
# Fetch the .debs on a Debian 12 machine with:
#   apt-get download python3-bpfcc libbpfcc libbpf1 libclang-cpp14 libllvm14 libz3-4 \
#       linux-headers-6.1.0-NN-amd64 linux-headers-6.1.0-NN-common
# (libz3-4: libLLVM-14 links it; the GPU machine's image has none, and without it bcc does
# not load: the eBPF sampler is then off and the run says so.)
deb_dir=${1:?usage: . bench/device_bcc_env.sh DEB_DIR}
root=/opt/xpu-bcc
mkdir -p "$root"
for f in "$deb_dir"/*.deb; do dpkg-deb -x "$f" "$root"; done
moddir=/lib/modules/$(uname -r)
hdr=$(ls -d "$root"/usr/src/linux-headers-*-amd64 | sort -V | tail -n1)
mkdir -p "$moddir"
[ -e "$moddir/build" ] || ln -s "$hdr" "$moddir/build"
[ -e "$moddir/source" ] || ln -s "${hdr%-amd64}-common" "$moddir/source"
grep -qs ' /sys/kernel/tracing tracefs ' /proc/mounts || mount -t tracefs nodev /sys/kernel/tracing
grep -qs ' /sys/kernel/debug debugfs ' /proc/mounts || mount -t debugfs nodev /sys/kernel/debug || true
export PYTHONPATH="$root/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}"
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing=$(ldd "$root"/usr/lib/x86_64-linux-gnu/libbcc.so.0 | grep 'not found' || true)
[ -z "$missing" ] || echo "device_bcc_env: libbcc needs: $missing" >&2
