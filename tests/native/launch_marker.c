/* Stand-in for the injection library's launch marker, for the uprobe tests.
 *
 *   launch_marker N
 *
 * Calls xpu_perf_launch_marker(correlation_id, api_id) exactly N times, with correlation
 * ids 1..N and api_id 7, from launch_site() (frame pointers kept so the stacks unwind).
 */
#include <stdint.h>
#include <stdlib.h>

static volatile uint64_t seen;

__attribute__((noinline, used, visibility("default")))
void xpu_perf_launch_marker(uint64_t correlation_id, uint32_t api_id)
{
    seen += correlation_id + api_id;
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void launch_site(uint64_t correlation_id)
{
    xpu_perf_launch_marker(correlation_id, 7);
    __asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000;
    for (long i = 1; i <= n; i++)
        launch_site((uint64_t)i);
    return 0;
}
