/* The cost of blocked-time capture (bench/waits_cost.py runs this under each setting):
 *
 *   waits_cost poll N     N x poll(NULL, 0, 0): a call that never blocks (under the threshold)
 *   waits_cost mutex N    N x an uncontended pthread_mutex_lock + unlock
 *   waits_cost read N     N x write 1 byte to a pipe, read it back (read never blocks)
 *   waits_cost over N     N x nanosleep(20 us): blocks ~70 us each (timer slack), every one
 *                         over a 1 us threshold
 *   waits_cost step N     N launch-bound steps: 200 "launches" of ~2 us of work, each taking
 *                         two uncontended locks and a poll(0) (a driver's path), then a
 *                         sync: a condition wait for a worker thread that answers after
 *                         ~300 us (a wait over the default threshold, recorded)
 *
 * Prints {"ns_per_iter": wall, "cpu_ns_per_iter": this thread's CPU time} for the loop alone
 * (the process's start and exit not counted; CPU time is what a loaded machine's preemption
 * does not inflate). */
#define _GNU_SOURCE
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static volatile uint64_t sink;
static pthread_mutex_t a = PTHREAD_MUTEX_INITIALIZER, b = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void launch(void) {
    pthread_mutex_lock(&a);
    for (int i = 0; i < 1500; i++) sink += (uint64_t)i * 2654435761u;
    pthread_mutex_unlock(&a);
    pthread_mutex_lock(&b);
    sink++;
    pthread_mutex_unlock(&b);
    poll(NULL, 0, 0);
}

/* The "GPU": a worker that finishes each step ~300 us after it is asked. */
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t asked = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static uint64_t requests, answers;
static int stop;

static void *gpu(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    for (;;) {
        while (requests == answers && !stop) pthread_cond_wait(&asked, &m);
        if (stop) break;
        pthread_mutex_unlock(&m);
        uint64_t until = now_ns() + 300000;
        while (now_ns() < until) sink++;
        pthread_mutex_lock(&m);
        answers++;
        pthread_cond_signal(&done);
    }
    pthread_mutex_unlock(&m);
    return NULL;
}

__attribute__((noinline)) static void synchronize(void) {
    pthread_mutex_lock(&m);
    uint64_t want = ++requests;
    pthread_cond_signal(&asked);
    while (answers < want) pthread_cond_wait(&done, &m);
    pthread_mutex_unlock(&m);
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    const char *mode = argv[1];
    long n = atol(argv[2]);
    int p[2];
    if (pipe(p) != 0) return 1;
    pthread_t worker;
    int steps = strcmp(mode, "step") == 0;
    if (steps) pthread_create(&worker, NULL, gpu, NULL);
    char c = 0;
    uint64_t t0 = now_ns(), c0 = cpu_ns();
    for (long i = 0; i < n; i++) {
        if (strcmp(mode, "poll") == 0) {
            poll(NULL, 0, 0);
        } else if (strcmp(mode, "mutex") == 0) {
            pthread_mutex_lock(&a);
            pthread_mutex_unlock(&a);
        } else if (strcmp(mode, "read") == 0) {
            if (write(p[1], &c, 1) != 1 || read(p[0], &c, 1) != 1) return 1;
        } else if (strcmp(mode, "over") == 0) {
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        } else if (steps) {
            for (int k = 0; k < 200; k++) launch();
            synchronize();
        } else {
            return 2;
        }
    }
    uint64_t elapsed = now_ns() - t0, cpu = cpu_ns() - c0;
    if (steps) {
        pthread_mutex_lock(&m);
        stop = 1;
        pthread_cond_signal(&asked);
        pthread_mutex_unlock(&m);
        pthread_join(worker, NULL);
    }
    printf("{\"ns_per_iter\": %.2f, \"cpu_ns_per_iter\": %.2f}\n", (double)elapsed / (double)n,
           (double)cpu / (double)n);
    return 0;
}
