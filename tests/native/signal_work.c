/* CPU work done inside a signal handler, for the CPU sampler's signal-frame test: the
 * samples taken in handler_work() must unwind through the kernel's signal frame
 * (__restore_rt) back to the interrupted main_loop() and main().
 *
 *   signal_work CPU_SECONDS
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static volatile uint64_t sink;

__attribute__((noinline)) void handler_work(void)
{
    uint64_t x = sink;
    for (int i = 0; i < 3000000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x;
}

static void on_alarm(int sig)
{
    (void)sig;
    handler_work();
}

__attribute__((noinline)) void main_loop(double seconds)
{
    struct timespec ts;
    do {
        for (volatile int i = 0; i < 100000; i++) {
        }
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    } while (ts.tv_sec + ts.tv_nsec / 1e9 < seconds);
}

int main(int argc, char **argv)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 20000}, {0, 20000}};
    setitimer(ITIMER_REAL, &it, NULL);
    main_loop(argc > 1 ? atof(argv[1]) : 2.0);
    return 0;
}
