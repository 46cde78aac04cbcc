/* Per-thread state of the traced threads: the outermost API call in flight, the staged API
 * and alias rows (threads.h), the thread's id and name (a THREAD row at its first traced call),
 * per-thread counts.  A thread's rows go into the stream when a batch fills, at each flush
 * and when the thread ends. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "threads.h"
#include "experiments.h"
#include "state.h"
#include "stream.h"

pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
struct thread_state *threads;
__thread struct thread_state *tls_state __attribute__((tls_model("initial-exec")));
static pthread_key_t thread_key;
static void (*first_call_hook)(void);

void emit_api_rows(struct thread_state *ts) {
    struct xp_batch_API *b = ts->api;
    uint32_t n = ts->n_api_rows;
    for (uint32_t r = 0; r < n; r++) {
        const struct api_row *row = &ts->api_rows[r];
        b->correlation_id[r] = row->correlation_id;
        b->api_id[r] = row->api_id;
        b->tid[r] = ts->tid;
        b->stack_id[r] = row->stack_id;
        b->start[r] = row->start;
        b->end[r] = row->end;
    }
    b->rows = n;
    ts->n_api_rows = 0;
    xp_emit_API(b);
}

void emit_alias_rows(struct thread_state *ts) {
    struct xp_batch_API_ALIAS *b = ts->alias;
    uint32_t n = ts->n_alias_rows;
    for (uint32_t r = 0; r < n; r++) {
        b->driver_correlation_id[r] = ts->alias_rows[r].driver_correlation_id;
        b->runtime_correlation_id[r] = ts->alias_rows[r].runtime_correlation_id;
    }
    b->rows = n;
    ts->n_alias_rows = 0;
    xp_emit_API_ALIAS(b);
}

static void free_thread_state(struct thread_state *ts) {
    free(ts->api_rows);
    free(ts->alias_rows);
    free(ts->api);
    free(ts->alias);
    free(ts);
}

/* A traced thread ends: its counts and rows go to the process, its state away. */
static void thread_exit(void *p) {
    struct thread_state *ts = p;
    pthread_mutex_lock(&threads_lock);
#ifdef XPU_PERF_EXPERIMENTS
    xp_selftime_thread_exit(&ts->st);
#endif
    counters.api_records += ts->n_api;
    counters.launches += ts->n_launch;
    counters.launch_stacks += ts->n_launch_stack;
    counters.launches_no_stack += ts->n_launch_no_stack;
    counters.alias_records += ts->n_alias;
    pthread_mutex_lock(&ts->lock);
    emit_api_rows(ts);
    emit_alias_rows(ts);
    pthread_mutex_unlock(&ts->lock);
    for (struct thread_state **pp = &threads; *pp; pp = &(*pp)->next) {
        if (*pp == ts) { *pp = ts->next; break; }
    }
    pthread_mutex_unlock(&threads_lock);
    free_thread_state(ts);
}

void threads_init(void (*first_traced_call)(void)) {
    first_call_hook = first_traced_call;
    pthread_key_create(&thread_key, thread_exit);
}

void threads_run_first_call_hook(void) {
    if (first_call_hook) first_call_hook();
}

/* The thread's id and name as the stream's THREAD row. */
static void emit_thread_name(struct thread_state *ts) {
    ts->tid = (uint32_t)syscall(SYS_gettid);
    char name[17] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    xp_emit_thread(ts->tid, name);
}

struct thread_state *thread_state_new(void) {
    if (first_call_hook) first_call_hook();
    struct thread_state *ts = calloc(1, sizeof *ts);
    if (!ts) return NULL;
    ts->api = malloc(sizeof *ts->api);
    ts->alias = malloc(sizeof *ts->alias);
    ts->api_rows = malloc(XP_BATCH_ROWS * sizeof *ts->api_rows);
    ts->alias_rows = malloc(XP_BATCH_ROWS * sizeof *ts->alias_rows);
    if (!ts->api || !ts->alias || !ts->api_rows || !ts->alias_rows) {
        free_thread_state(ts);
        return NULL;
    }
    pthread_mutex_init(&ts->lock, NULL);
    emit_thread_name(ts);
    pthread_mutex_lock(&threads_lock);
    ts->next = threads;
    threads = ts;
    pthread_mutex_unlock(&threads_lock);
    pthread_setspecific(thread_key, ts);
    tls_state = ts;
    return ts;
}

void threads_flush_rows(void) {
    pthread_mutex_lock(&threads_lock);
    for (struct thread_state *ts = threads; ts; ts = ts->next) {
        pthread_mutex_lock(&ts->lock);
        emit_api_rows(ts);
        emit_alias_rows(ts);
        pthread_mutex_unlock(&ts->lock);
    }
    pthread_mutex_unlock(&threads_lock);
}

void threads_fork_child(void) {
    pthread_mutex_init(&threads_lock, NULL);
    struct thread_state *keep = tls_state;
    for (struct thread_state *ts = threads, *next; ts; ts = next) {
        next = ts->next;
        if (ts == keep) continue;
        free_thread_state(ts);
    }
    threads = keep;
    if (keep) {
        keep->next = NULL;
        pthread_mutex_init(&keep->lock, NULL);
        keep->n_api_rows = 0;
        keep->n_alias_rows = 0;
        keep->depth = 0;
#ifdef XPU_PERF_EXPERIMENTS
        memset(&keep->st, 0, sizeof keep->st);
#endif
        emit_thread_name(keep);
    }
}

#ifdef XPU_PERF_EXPERIMENTS
void threads_selftime_report(void) {
    if (!xp_exp.selftime) return;
    struct xp_selftime live = {0};
    pthread_mutex_lock(&threads_lock); /* the ended threads' parts are added under it too */
    for (struct thread_state *ts = threads; ts; ts = ts->next) xp_selftime_add(&live, &ts->st);
    xp_selftime_report(&live);
    pthread_mutex_unlock(&threads_lock);
}
#endif
