/* A sample clock's SIGPROF and a SIGURG delivered together, for the CPU sampler's test that
 * the profiler's own signal handlers never appear in the program's stacks: both signals are
 * blocked while spin() burns a few periods of CPU (the sampler's perf clock overflows, its
 * SIGPROF stays pending), the program sends itself SIGURG (what the eBPF kernel-mode sampler
 * sends as root), and one sigprocmask unblocks both.  The kernel then starts the SIGURG
 * handler and, unless its mask holds SIGPROF back, stacks the SIGPROF handler on top of it at
 * its first instruction: the sample would name the sampler's handler, not the program (held
 * back, it is delivered where the program unblocks it, in sigprocmask).
 *
 *   paired_signals CPU_SECONDS
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static volatile uint64_t sink;

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void spin(double seconds)
{
    uint64_t x = sink;
    double end = cpu_seconds() + seconds;
    while (cpu_seconds() < end)
        for (int i = 0; i < 20000; i++)
            x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 2.0;
    sigset_t both, old;
    sigemptyset(&both);
    sigaddset(&both, SIGPROF);
    sigaddset(&both, SIGURG);
    double end = cpu_seconds() + seconds;
    while (cpu_seconds() < end) {
        sigprocmask(SIG_BLOCK, &both, &old);
        spin(0.003); /* three periods at 999 Hz */
        raise(SIGURG);
        sigprocmask(SIG_SETMASK, &old, NULL);
    }
    return 0;
}
