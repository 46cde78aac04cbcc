# Source this on the GPU machine (no package registry there) to make bcc usable from carried
# Debian 12 .debs:  . bench/device_bcc_env.sh DEB_DIR
# It unpacks python3-bpfcc, libbpfcc, LLVM/clang 14 and the Debian 6.1 kernel headers under
# /opt/xpu-bcc (never over /), links /lib/modules/$(uname -r)/{build,source} to those headers
# when the kernel ships none, mounts tracefs, and exports PYTHONPATH / LD_LIBRARY_PATH.
# Fetch the .debs on a Debian 12 machine with:
#   apt-get download python3-bpfcc libbpfcc libbpf1 libclang-cpp14 libllvm14 \
#       linux-headers-6.1.0-NN-amd64 linux-headers-6.1.0-NN-common
# libLLVM-14 links libz3.so.4, which the GPU machine's image lacks (without it bcc does not
# load); its .deb would take the carried tree past the device's 64 MiB, and bcc's BPF
# compiles never call Z3, so a stub of the Z3_ symbols libLLVM names is built here instead.
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
llvm=$(ls "$root"/usr/lib/x86_64-linux-gnu/libLLVM-14.so* 2>/dev/null | head -n1)
if [ -n "$llvm" ] && ! ldconfig -p | grep -q 'libz3.so.4 ' && [ ! -e "$root/usr/lib/x86_64-linux-gnu/libz3.so.4" ]; then
    nm -D --undefined-only "$llvm" | awk '$2 ~ /^Z3_/ { print "void " $2 "(void) {}" }' > /tmp/z3_stub.c
    gcc -shared -fPIC -o "$root/usr/lib/x86_64-linux-gnu/libz3.so.4" -Wl,-soname,libz3.so.4 /tmp/z3_stub.c \
        || echo "device_bcc_env: could not build a libz3.so.4 stub" >&2
fi
missing=$(ldd "$root"/usr/lib/x86_64-linux-gnu/libbcc.so.0 | grep 'not found' || true)
[ -z "$missing" ] || echo "device_bcc_env: libbcc needs: $missing" >&2
