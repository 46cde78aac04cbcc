/* The injection library's life in the process after its set-up: the flush hook the stream's
 * writer calls (pull CUPTI's buffers, every thread's staged rows, the module map; at the
 * final flush the open window's end and the counters), and every way the process ends or
 * splits: atexit (registered again at a thread's first traced call, so the final flush runs
 * before the driver's own teardown), _exit / exec / a signal the process sends itself (through
 * the preloaded sampler library's process hooks), SIGTERM/SIGINT with the default action
 * (flushed on a helper thread, then re-raised), and fork (the child starts a stream of its
 * own). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <semaphore.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lifecycle.h"
#include "activity.h"
#include "api_callbacks.h"
#include "counters.h"
#include "experiments.h"
#include "launch_stacks.h"
#include "modules.h"
#include "pm_sampling.h"
#include "program_profiler.h"
#include "program_records.h"
#include "pyframes.h"
#include "state.h"
#include "stream.h"
#include "strings.h"
#include "threads.h"
#include "windows.h"

/* ---- flushing ---- */
static void flush_hook(int final) {
    if (final) program_profiler_final(); /* the program's client is not fed at the end */
    if (!atomic_load(&cupti_forked))
        cuptiActivityFlushAll(final ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
    if (!final) {
        windows_periodic();
        /* Normally at the first traced call; with the callbacks off outside capture windows
         * there may be none, and the final flush must still run before the driver's own
         * teardown (registered during cuInit, which has returned by now). */
        register_late_atexit_once();
    }
    threads_flush_rows();
    xp_modules_emit_if_changed();
    if (final) end_open_window();
    if (final) pm_sampling_final(); /* its last samples, before the counters */
    if (final) emit_counters();
    if (final) threads_selftime_report();
}

static void at_exit(void) { xp_stream_flush(1); }

/* The preloaded sampler library (record preloads it with or without CPU sampling) runs
 * this final flush when the process ends through _exit or a signal it sends itself, which
 * skip atexit (process_hooks.h).  Found by name: libcuda loads us RTLD_LOCAL. */
static void register_exit_flush(void) {
    void (*on_exit_flush)(void (*)(int)) =
        (void (*)(void (*)(int)))dlsym(RTLD_DEFAULT, "xpu_perf_on_exit");
    if (on_exit_flush) on_exit_flush(xp_stream_flush);
}

static pthread_once_t late_atexit_once = PTHREAD_ONCE_INIT;
/* atexit handlers run last-registered first: registering again at the first API call (after
 * cuInit has registered the driver's own teardown) makes our final flush run before it. */
static void register_late_atexit(void) { atexit(at_exit); }
void register_late_atexit_once(void) { pthread_once(&late_atexit_once, register_late_atexit); }

/* SIGTERM/SIGINT with the default action: flush on a helper thread, then die as asked. */
static sem_t signal_sem;
static atomic_int signal_flush_done;
static int signal_thread_started;

static void *signal_flush_main(void *arg) {
    (void)arg;
    sigset_t all; /* the signal it flushes for goes to an application thread */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    while (sem_wait(&signal_sem) != 0) {}
    xp_stream_flush(1);
    atomic_store(&signal_flush_done, 1);
    return NULL;
}

static void on_fatal_signal(int sig) {
    sem_post(&signal_sem);
    for (int i = 0; i < 300 && !atomic_load(&signal_flush_done); i++) {
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

static void start_signal_thread(void) {
    pthread_t t;
    sem_init(&signal_sem, 0, 0);
    atomic_store(&signal_flush_done, 0);
    if (pthread_create(&t, NULL, signal_flush_main, NULL) == 0) {
        pthread_detach(t);
        signal_thread_started = 1;
    }
}

static void install_signal_handlers(void) {
    int sigs[2] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0) continue;
        if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* ---- fork ---- */
static void fork_prepare(void) {
    pthread_mutex_lock(&window_lock); /* taken before the others wherever both are held */
    pthread_mutex_lock(&activity_lock);
    pthread_mutex_lock(&threads_lock);
    pthread_mutex_lock(&stack_emit_lock);
}
static void fork_parent(void) {
    pthread_mutex_unlock(&stack_emit_lock);
    pthread_mutex_unlock(&threads_lock);
    pthread_mutex_unlock(&activity_lock);
    pthread_mutex_unlock(&window_lock);
}
static void fork_child(void) {
    /* The parent's stream owns everything recorded so far: start clean. */
    atomic_store(&cupti_forked, 1);
    launch_stacks_fork_child();
    threads_fork_child();
    activity_fork_child();
    xp_strings_reset();
    xp_py_fork_child();
    xp_modules_reset();
    counters_reset();
    xp_selftime_fork_child();
    windows_fork_child();
    program_profiler_fork_child();
    program_records_fork_child();
    pm_sampling_fork_child();
    emit_api_names(); /* the child's stream is new: it needs the names too */
    if (signal_thread_started) start_signal_thread();
}

/* ---- after the set-up ---- */
void lifecycle_start(void) {
    xp_stream_set_flush_hook(flush_hook);
    xp_modules_emit_if_changed();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    start_signal_thread();
    install_signal_handlers();
    atexit(at_exit);
    register_exit_flush();
}
