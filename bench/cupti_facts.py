"""The CUPTI facts issue 25's serving rests on, measured in a process of its own with torch on
the GPU (no xpu-perf in it):
- which libcupti torch loads, and how libtorch_cuda binds CUPTI (a NEEDED entry and undefined
  cupti* symbols: the preloaded sampler library's interposed entry points come first then);
- what CUPTI answers a second cuptiSubscribe;
- how an activity buffer is laid out: the first record's offset, whether each record follows
  the previous one, and whether cuptiActivityGetNextRecord walks a copy of the buffer, and a
  copy holding only some records' spans (what cupti_inject/src/program_records.c hands the
  program's profiler), as it walks the original.

    python3 bench/cupti_facts.py
"""

from __future__ import annotations

import ctypes
import itertools
import os
import subprocess
from pathlib import Path

import torch

from collector.inject_build import find_cupti

KERNEL, RUNTIME = 10, 5  # CUpti_ActivityKind
BUFFER = 4 << 20


def linkage() -> None:
    print("torch", torch.__version__, "cuda", torch.version.cuda)
    print("build finds CUPTI:", find_cupti())
    lib = os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so")
    needed = subprocess.run(["readelf", "-d", lib], capture_output=True, text=True).stdout
    print("libtorch_cuda NEEDED:", [x.split()[-1] for x in needed.splitlines() if "cupti" in x])
    undef = subprocess.run(
        ["nm", "-D", "--undefined-only", lib], capture_output=True, text=True
    ).stdout
    print("libtorch_cuda undefined cupti symbols:", sum("cupti" in x for x in undef.splitlines()))


def walk(cupti: ctypes.CDLL, base: int, valid: int) -> list[tuple[int, int]]:
    """(offset, kind) of each record cuptiActivityGetNextRecord finds."""
    out = []
    rec = ctypes.c_void_p(None)
    while cupti.cuptiActivityGetNextRecord(ctypes.c_void_p(base), ctypes.c_size_t(valid),
                                           ctypes.byref(rec)) == 0:  # fmt: skip
        out.append((rec.value - base, ctypes.c_uint32.from_address(rec.value).value))
    return out


def main() -> None:
    linkage()
    torch.ones(1, device="cuda")
    lines = Path("/proc/self/maps").read_text().splitlines()
    maps = sorted({x.split()[-1] for x in lines if "libcupti" in x})
    print("libcupti mapped after CUDA init:", maps)
    cupti = ctypes.CDLL(maps[0] if maps else str(find_cupti().lib_dir / "libcupti.so.13"))
    callback = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint, ctypes.c_void_p)
    noop = callback(lambda *a: None)
    first, second = ctypes.c_void_p(), ctypes.c_void_p()
    r1 = cupti.cuptiSubscribe(ctypes.byref(first), noop, None)
    r2 = cupti.cuptiSubscribe(ctypes.byref(second), noop, None)
    print(f"cuptiSubscribe: first {r1}, second {r2} (39: MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED)")
    cupti.cuptiUnsubscribe(first)

    buffers: list[ctypes.Array] = []
    done: list[tuple[int, int]] = []
    size_p = ctypes.POINTER(ctypes.c_size_t)
    request_t = ctypes.CFUNCTYPE(None, ctypes.POINTER(ctypes.c_void_p), size_p, size_p)
    complete_t = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p,
                                  ctypes.c_size_t, ctypes.c_size_t)  # fmt: skip

    def request(buf, size, max_records) -> None:
        b = (ctypes.c_uint64 * (BUFFER // 8))()  # 8-byte aligned
        buffers.append(b)
        buf[0] = ctypes.addressof(b)
        size[0] = BUFFER
        max_records[0] = 0

    def complete(ctx, stream, buf, size, valid) -> None:
        done.append((buf, valid))

    req, comp = request_t(request), complete_t(complete)
    print("register:", cupti.cuptiActivityRegisterCallbacks(req, comp))
    print("enable:", cupti.cuptiActivityEnable(KERNEL), cupti.cuptiActivityEnable(RUNTIME))
    x = torch.randn(256, 256, device="cuda")
    for _ in range(20):
        x = torch.nn.functional.gelu(x @ x)
    torch.cuda.synchronize()
    cupti.cuptiActivityFlushAll(1)
    cupti.cuptiActivityDisable(KERNEL)
    cupti.cuptiActivityDisable(RUNTIME)
    for base, valid in done:
        records = walk(cupti, base, valid)
        if not records:
            continue
        steps = [b[0] - a[0] for a, b in itertools.pairwise(records)]
        kinds = sorted({k for _, k in records})
        print(f"buffer: valid {valid}, records {len(records)}, first at offset {records[0][0]}, "
              f"kinds {kinds}, record sizes {sorted(set(steps))}")  # fmt: skip
        copy = (ctypes.c_uint64 * (BUFFER // 8))()
        ctypes.memmove(copy, base, valid)
        same = walk(cupti, ctypes.addressof(copy), valid) == records
        print("a whole copy walks as the original:", same)
        head = records[0][0]
        ends = [o for o, _ in records[1:]] + [valid + head]
        spans = [(o - head, end - head) for (o, k), end in zip(records, ends, strict=True)
                 if k == KERNEL]  # fmt: skip
        compact = (ctypes.c_uint64 * (BUFFER // 8))()
        used = 0
        for lo, hi in spans:
            ctypes.memmove(ctypes.addressof(compact) + used, base + lo, hi - lo)
            used += hi - lo
        walked = walk(cupti, ctypes.addressof(compact), used)
        print(f"the kernel records' spans alone ({len(spans)}) walk as {len(walked)} records "
              f"of kinds {sorted({k for _, k in walked})}")  # fmt: skip


if __name__ == "__main__":
    main()
