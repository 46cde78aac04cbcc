/* Stand-in for libcudart: only cudaLaunchKernel, for the uprobe test of runs without the
 * injection library (`record --no-gpu --launch-stacks ebpf`).  Built as libcudart.so.13. */
#include <stdint.h>

static volatile uint64_t launched;

__attribute__((noinline, visibility("default")))
int cudaLaunchKernel(const void *func, uint64_t grid, uint64_t block, void **args,
                     uint64_t shared_mem, void *stream)
{
    launched += (uint64_t)(uintptr_t)func + grid + block + shared_mem;
    (void)args;
    (void)stream;
    __asm__ volatile("" ::: "memory");
    return 0;
}
