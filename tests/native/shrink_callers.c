/* Two callers, 3:1, of one leaf, for the CPU sampler's CFI tests.  Built twice by the test:
 * -O2 -g without frame pointers (nothing to walk but CFI), and -O1 -g -fno-omit-frame-pointer
 * (gcc shrink-wraps the leaf: no frame set-up, so a frame-pointer walk skips its caller).
 * The leaf writes a volatile counter so that gcc cannot find it pure and fold the heavy
 * caller's three calls into one.
 *
 *   shrink_callers CPU_SECONDS
 */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink, calls;

__attribute__((noinline)) uint64_t leaf(uint64_t n)
{
    uint64_t x = n;
    calls++;
    for (uint64_t i = 0; i < n; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return x;
}

__attribute__((noinline)) void heavy_caller(void)
{
    for (int i = 0; i < 3; i++)
        sink += leaf(2000000);
}

__attribute__((noinline)) void light_caller(void) { sink += leaf(2000000); }

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    struct timespec ts;
    do {
        heavy_caller();
        light_caller();
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    } while (ts.tv_sec + ts.tv_nsec / 1e9 < seconds);
    return 0;
}
