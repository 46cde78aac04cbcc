"""Device allocations of known sizes from three Python functions, for the memory peak and
its allocation sites: cudaMalloc through CuPy's runtime bindings (no caching allocator in
between: each call is one allocation of exactly that size), plus one stream-ordered
cudaMallocAsync.  The peak: weights 3 x 512 MiB + activations 2 x 128 MiB (two of four
freed) + pool 256 MiB + workspace 1024 MiB = 3072 MiB, reached at the workspace's
allocation."""

from __future__ import annotations

from cupy.cuda import runtime

MIB = 1 << 20


def alloc_weights() -> list[int]:
    return [runtime.malloc(512 * MIB) for _ in range(3)]


def alloc_activations() -> list[int]:
    return [runtime.malloc(128 * MIB) for _ in range(4)]


def alloc_pool(stream: int) -> int:
    return runtime.mallocAsync(256 * MIB, stream)


def alloc_workspace() -> int:
    return runtime.malloc(1024 * MIB)


def main() -> None:
    runtime.setDevice(0)
    stream = runtime.streamCreate()
    weights = alloc_weights()
    activations = alloc_activations()
    for ptr in activations[:2]:
        runtime.free(ptr)
    pool = alloc_pool(stream)
    runtime.streamSynchronize(stream)
    workspace = alloc_workspace()
    runtime.free(workspace)
    runtime.freeAsync(pool, stream)
    runtime.streamSynchronize(stream)
    for ptr in activations[2:] + weights:
        runtime.free(ptr)
    print("memory_sites: expected peak 3072 MiB (weights 1536, workspace 1024, pool 256, acts 256)")


if __name__ == "__main__":
    main()
