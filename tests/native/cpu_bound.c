/* Fixed amount of CPU work for the sampler overhead benchmark (bench/sampler_overhead.py):
 *
 *   cpu_bound ITERATIONS_MILLIONS
 *
 * Prints the wall time it took in seconds.  Uses a dependent multiply-add chain and a
 * little memory traffic so that both pure compute and cache effects of sampling show.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t table[1 << 16];

__attribute__((noinline)) uint64_t step(uint64_t x, uint64_t i)
{
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    table[(x >> 20) & 0xFFFF] += i;
    return x;
}

int main(int argc, char **argv)
{
    long millions = argc > 1 ? atol(argv[1]) : 200;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t x = 1;
    for (uint64_t i = 0; i < (uint64_t)millions * 1000000; i++)
        x = step(x, i);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("%.6f %lu\n", (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9,
           (unsigned long)(x ^ table[x & 0xFFFF]));
    return 0;
}
