"""CUDA API calls of a CUPTI stream: the names users know, which calls are launches, whether
a launch stack reaches the user's code, and the API table as CPU rows with launch stacks."""

from __future__ import annotations

import os
import re
from collections import Counter

import numpy as np

from collector import model
from collector.sources.cupti_launch_stacks import stream_stacks
from collector.sources.cupti_rows import CpuRows, find_rows
from collector.sources.cupti_stream import Stream
from collector.symbolize import Symbolizer

LAUNCH_PREFIXES = (
    "cudaLaunchKernel",
    "cudaLaunchCooperativeKernel",
    "cudaGraphLaunch",
    "cuLaunchKernel",
    "cuLaunchCooperativeKernel",
    "cuGraphLaunch",
    "cuLaunchGrid",
)
# Frames of these libraries do not count as a launch site (the stack criterion).
CUDA_LIBRARY_MARKERS = ("libcuda.so", "libcupti.so", "libcudart.so", "libxpu_perf_cupti.so")
API_VERSION_SUFFIX = re.compile(r"(_v\d+)?(_pt(sz|ds))?(_v\d+)?$")


def is_launch(api_name: str) -> bool:
    return api_name.startswith(LAUNCH_PREFIXES)


def api_name(cupti_name: str) -> str:
    """The name users know: CUPTI's `cudaLaunchKernel_v7000` and `cuLaunchKernel_ptsz` are
    `cudaLaunchKernel` and `cuLaunchKernel` (the version and per-thread-stream variants of
    one API call)."""
    return API_VERSION_SUFFIX.sub("", cupti_name) or cupti_name


def has_user_frame(stack: model.Stack | None) -> bool:
    """True when a stack has a frame outside libcuda/libcupti/libcudart (and this library)."""
    if stack is None:
        return False
    return any(
        not any(m in os.path.basename(f.module) for m in CUDA_LIBRARY_MARKERS) for f in stack.frames
    )


def launch_stacks(
    stream: Stream, strings: dict[int, str], symbolizer: Symbolizer, counts: Counter[str]
) -> dict[int, model.Stack]:
    """The stream's launch stacks by stack id, symbolized (counted as `stacks_unique`)."""
    out = stream_stacks(stream, strings, symbolizer, counts=counts, launch=True)
    counts["stacks_unique"] += len(out)
    return out


def api_rows(
    stream: Stream, strings: dict[int, str], symbolizer: Symbolizer, counts: Counter[str]
) -> CpuRows:
    """The API calls as CPU rows, with their launch stacks, and the launch counts."""
    api = stream.table("API")
    cpu = CpuRows()
    counts["records_api"] += api.rows
    if not api.rows:
        return cpu
    api_names = stream.table("API_NAME")
    names = dict(zip(api_names["api_id"], api_names["name"], strict=True))
    api_id = np.asarray(api["api_id"], np.int64)
    ids, name_index = np.unique(api_id, return_inverse=True)
    id_names = [api_name(names.get(i, f"cuda_api_{i:#x}")) for i in ids.tolist()]
    stacks = launch_stacks(stream, strings, symbolizer, counts)
    stack_ids = np.asarray(api["stack_id"], np.int64)
    known = np.array(sorted(stacks), np.int64)
    stack_index = find_rows(known, stack_ids)  # -1 is model.NONE: no stack
    found = stack_index >= 0
    # Launch counts per row: a launch API, with a stack, with a frame of the user's.
    launch = np.array([is_launch(n) for n in id_names], bool)[name_index]
    # (one more False for rows without a stack)
    user = np.array([has_user_frame(stacks[i]) for i in known.tolist()] + [False], bool)
    counts["launches"] += int(launch.sum())
    counts["launches_without_stack"] += int((launch & ~found).sum())
    counts["launches_with_user_frame"] += int((launch & user[stack_index]).sum())
    start = np.asarray(api["start"], np.int64)
    cpu.add(
        ts=start,
        dur=np.maximum(np.asarray(api["end"], np.int64) - start, 0),
        track=np.asarray(api["tid"], np.int64),
        name=cpu.names.index_of(id_names)[name_index],
        category=cpu.categories.index_of([model.CAT_CUDA_API])[0],
        args=cpu.arg_sets.index_of([()])[0],
        correlation_id=np.asarray(api["correlation_id"], np.int64),
        stack=stack_index,
    )
    cpu.stacks = [stacks[i] for i in known.tolist()]
    return cpu
