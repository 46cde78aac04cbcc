/* Known call structure for the CPU sampler tests: heavy_caller() and light_caller() run the
 * same work loop, 3 units vs 1 unit per round, so 75% / 25% of the CPU time is under each.
 * A round is long (~0.4 s): timer sampling of long blocks is systematic, so the measured
 * split is exact to within about one sample per block instead of binomial noise.
 *
 *   two_callers SECONDS [CPU_TIME_FILE] [--fork]
 *
 * Burns SECONDS of CPU time, then writes "CPU_SECONDS PID PPID" to CPU_TIME_FILE (CPU time
 * from CLOCK_PROCESS_CPUTIME_ID, of the process that did the work).  With --fork the work runs in a forked
 * child (same code, no exec) while the parent waits: the sampler must follow the fork.
 * Built with frame pointers so eBPF can unwind it.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile uint64_t sink;

/* Not a leaf: gcc 12 drops the frame pointer of leaf functions even with
 * -mno-omit-leaf-frame-pointer, and a sample inside a frameless leaf unwinds past its caller
 * (build.py also turns sibling calls off, or `return finish(x)` would become a jump). */
__attribute__((noinline)) uint64_t finish(uint64_t x) { return x ^ (x >> 31); }

__attribute__((noinline)) uint64_t burn(uint64_t units)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < units * 200000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    return finish(x);
}

#define UNIT 400 /* x 200000 iterations: about 0.1 s */

__attribute__((noinline)) void heavy_caller(void) { sink += burn(3 * UNIT); }
__attribute__((noinline)) void light_caller(void) { sink += burn(UNIT); }

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void work(double seconds, const char *cpu_time_file)
{
    while (cpu_seconds() < seconds) {
        heavy_caller();
        light_caller();
    }
    if (cpu_time_file) {
        FILE *f = fopen(cpu_time_file, "w");
        if (!f)
            exit(3);
        fprintf(f, "%.6f %d %d\n", cpu_seconds(), (int)getpid(), (int)getppid());
        fclose(f);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s SECONDS [CPU_TIME_FILE] [--fork]\n", argv[0]);
        return 2;
    }
    double seconds = atof(argv[1]);
    const char *cpu_time_file = argc > 2 && strcmp(argv[2], "--fork") ? argv[2] : NULL;
    int do_fork = argc > 2 && !strcmp(argv[argc - 1], "--fork");
    if (!do_fork) {
        work(seconds, cpu_time_file);
        return 0;
    }
    pid_t child = fork();
    if (child < 0)
        return 4;
    if (child == 0) {
        work(seconds, cpu_time_file);
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}
