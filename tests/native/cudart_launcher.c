/* Calls cudaLaunchKernel from tests/native/fake_cudart.c exactly N times from
 * forward_layer(), after a pause that lets the recorder see libcudart mapped.
 *
 *   cudart_launcher N
 */
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

int cudaLaunchKernel(const void *func, uint64_t grid, uint64_t block, void **args,
                     uint64_t shared_mem, void *stream);

static void kernel_stub(void) {}

__attribute__((noinline)) void forward_layer(long i)
{
    cudaLaunchKernel((const void *)kernel_stub, (uint64_t)i, 128, 0, 0, 0);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100;
    usleep(1000 * 1000); /* the recorder attaches name-given probes within 0.25 s of a mapping */
    for (long i = 0; i < n; i++)
        forward_layer(i);
    return 0;
}
