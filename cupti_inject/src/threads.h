/* Per-thread state of the traced threads (threads.c): the outermost API call in flight, the
 * staged API and alias rows, the thread's id and name, per-thread counts. */
#ifndef XP_THREADS_H
#define XP_THREADS_H

#include <pthread.h>
#include <stdint.h>

#include "experiments.h"
#include "stream.h"

/* API and alias rows are staged row by row on the calling thread and turned into columnar
 * batches only when a batch is emitted: one row is then one or two adjacent cache lines on
 * the launch path instead of one line per column (the application's own work between two
 * launches evicts them, so each line touched there is a cache miss). */
struct api_row { uint32_t correlation_id, api_id, stack_id, unused; uint64_t start, end; };
struct alias_row { uint32_t driver_correlation_id, runtime_correlation_id; };

struct thread_state {
    /* Hot: read or written at every traced call (kept together, first). */
    pthread_mutex_t lock; /* rows vs the flushing thread */
    int depth;
    uint32_t tid;
    uint32_t outer_corr;
    uint32_t outer_api;
    uint32_t outer_stack;
    uint8_t outer_flags; /* the API flags of the outermost call, kept for its exit */
    uint32_t api_generation; /* api_callbacks.c's, at the outermost call's enter */
    uint32_t n_api_rows, n_alias_rows;
    uint64_t outer_start;
    /* Per-thread counts (no shared cache line on the launch path); summed at flush. */
    uint64_t n_api, n_launch, n_launch_stack, n_launch_no_stack, n_alias;
    struct thread_state *next;
    struct api_row *api_rows;     /* XP_BATCH_ROWS each */
    struct alias_row *alias_rows;
    struct xp_batch_API *api;     /* columnar scratch for emitting */
    struct xp_batch_API_ALIAS *alias;
#ifdef XPU_PERF_EXPERIMENTS
    struct xp_selftime st;
#endif
};

extern pthread_mutex_t threads_lock;
extern struct thread_state *threads; /* every live thread's state, under threads_lock */
extern __thread struct thread_state *tls_state __attribute__((tls_model("initial-exec")));

struct thread_state *thread_state_new(void);
/* This thread's state, made at its first traced call (NULL: out of memory). */
static inline struct thread_state *thread_state(void) {
    struct thread_state *ts = tls_state;
    return ts ? ts : thread_state_new();
}
/* first_traced_call: run at each thread's first traced call (lifecycle.c's: our final flush
 * must run before the driver's teardown, which cuInit registered). */
void threads_init(void (*first_traced_call)(void));
/* What threads_init was handed, run now (idempotent there): for an event before any traced
 * call that needs it (a context created: the driver's teardown is registered by then). */
void threads_run_first_call_hook(void);
/* Turn the staged rows into a columnar chunk (caller holds ts->lock). */
void emit_api_rows(struct thread_state *ts);
void emit_alias_rows(struct thread_state *ts);
/* Every thread's staged rows into the stream (the flush). */
void threads_flush_rows(void);
/* Only the calling thread lives on in a forked child. */
void threads_fork_child(void);
#ifdef XPU_PERF_EXPERIMENTS
/* XPU_PERF_SELFTIME's line at the final flush: every thread's parts, live or ended. */
void threads_selftime_report(void);
#else
static inline void threads_selftime_report(void) {}
#endif

#endif
