# Source this on the GPU machine (no package registry there): installs xpu-perf's record-time
# dependencies from the carried wheel folder .whl (see bench/cpu_sampling_gpu.sh for how it is
# filled) into /tmp/xpu-deps and puts them and the checkout on PYTHONPATH.
python3 -m pip install -q --no-index --find-links .whl --target /tmp/xpu-deps \
    perfetto protobuf deflate pyelftools cxxfilt ijson orjson rich py-spy >/dev/null 2>&1
# NVML bindings (record --gpu-metrics): the image has nvidia-ml-py; a carried wheel wins.
if ls .whl/nvidia_ml_py-*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --find-links .whl --target /tmp/xpu-deps nvidia-ml-py >/dev/null 2>&1
fi
export PYTHONPATH="/tmp/xpu-deps:$PWD" PATH="/tmp/xpu-deps/bin:$PATH"
