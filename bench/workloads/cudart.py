"""cudaMemsetAsync through ctypes.

PyTorch has no Python call that issues a real cudaMemset: `zero_()` / `torch.zeros`
launch a fill kernel.  Traces need genuine memset activity (and memset graph nodes),
so this binds the one runtime function from the libcudart that torch already loaded.
"""

from __future__ import annotations

import ctypes
import glob
import os
from functools import lru_cache

import torch


def _candidate_paths() -> list[str]:
    major = (torch.version.cuda or "").split(".")[0]
    names = [f"libcudart.so.{major}"] if major else []
    names.append("libcudart.so")
    # pip wheels keep libcudart under site-packages/nvidia/**/lib, not on the loader path.
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names += sorted(glob.glob(os.path.join(site, "nvidia", "**", "libcudart.so*"), recursive=True))
    return names


@lru_cache(maxsize=1)
def _memset_async() -> ctypes._CFuncPtr | None:
    torch.cuda.init()  # make sure torch's own libcudart is loaded first, so dlopen reuses it
    for path in _candidate_paths():
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        function = library.cudaMemsetAsync
        function.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_size_t,
            ctypes.c_void_p,
        ]
        function.restype = ctypes.c_int
        return function
    return None


def have_memset() -> bool:
    return _memset_async() is not None


def memset_async(tensor: torch.Tensor, value: int = 0) -> None:
    """Set every byte of a contiguous CUDA tensor to `value` on the current stream.

    Falls back to `fill_` (a kernel, not a memset) when libcudart cannot be bound.
    """
    function = _memset_async()
    if function is None:
        tensor.fill_(value)
        return
    if not tensor.is_contiguous():
        raise ValueError("memset_async needs a contiguous tensor")
    stream = torch.cuda.current_stream(tensor.device).cuda_stream
    status = function(tensor.data_ptr(), value, tensor.numel() * tensor.element_size(), stream)
    if status != 0:
        raise RuntimeError(f"cudaMemsetAsync failed with cudaError {status}")
