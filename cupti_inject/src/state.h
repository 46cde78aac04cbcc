/* Internal to the CUPTI injection library (not installed, not for the sampler): the state its
 * files share and each file's entry points, at the bottom of every file (inject.c, the entry,
 * is above them all: nothing calls into it).  One job per file:
 *   inject.c         entry point (InitializeInjection) and the set-up order
 *   lifecycle.c      after the set-up: the flush hook; exit, _exit, exec, signal and fork
 *                    handling
 *   config.c         the product switches, read once (config.h)
 *   api_callbacks.c  which APIs are traced, the callback: API rows, correlation aliases,
 *                    the launch-site hook
 *   threads.c        per-thread state: staged API/alias rows, thread ids and names
 *   launch_stacks.c  the launch stack of an API call: unwind, Python frames, dedupe
 *   sync_ops.c       SYNC rows from the sync calls' callbacks (and CUPTI's records)
 *   activity.c       CUPTI activity buffers: request, parse records into batches, free
 *   nvtx.c           NVTX: hand-off to CUPTI, MARKER activity once NVTX is used
 *   windows.c        capture windows: open_window / close_window, delay timer, limit
 *   counters.c       the counts written into the stream at the final flush
 *   program_profiler.c  the program's own CUPTI client, served from our session (or refused)
 *   program_records.c   its activity records: copied into its buffers, in its clock
 *   pm_sampling.c    CUPTI PM sampling: GPU counters per device, decoded on a thread of ours
 *   pm_config.c      its config image: the metric list for a chip, in one pass (pm_sampling.h)
 *   experiments.c    measurement-only switches (only with XPU_PERF_EXPERIMENTS) */
#ifndef XP_STATE_H
#define XP_STATE_H

#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#include "config.h"
#include "experiments.h"
#include "stream.h"

#define EXPORT __attribute__((visibility("default")))
#define NO_ID 0xffffffffu

#define CHECK(call)                                                                          \
    do {                                                                                     \
        CUptiResult r_ = (call);                                                             \
        if (r_ != CUPTI_SUCCESS) {                                                           \
            const char *s_ = NULL;                                                           \
            cuptiGetResultString(r_, &s_);                                                   \
            fprintf(stderr, "xpu-perf: %s failed: %s\n", #call, s_ ? s_ : "?");             \
        }                                                                                    \
    } while (0)

/* ---- lifecycle.c ---- */
/* After the set-up: the flush hook, fork handlers, the signal flush thread, atexit and the
 * sampler library's exit hooks. */
void lifecycle_start(void);
/* At a thread's first traced call: our final flush must run before the driver's teardown. */
void register_late_atexit_once(void);

/* ---- api_callbacks.c ---- */
/* What a traced API is, per callback id. */
enum { TRACED = 1, LAUNCH = 2, SYNC_CONTEXT = 4, SYNC_STREAM = 8, SYNC_EVENT = 16, SYNC_WAIT = 32,
       PROFILER_START = 64, PROFILER_STOP = 128 /* cudaProfilerStart/Stop, cuProfiler*: windows */ };
#define SYNC_ANY (SYNC_CONTEXT | SYNC_STREAM | SYNC_EVENT | SYNC_WAIT)
/* Sync ops from the API callbacks (not XPU_PERF_SYNC_ACTIVITY, callbacks on). */
extern int sync_from_callbacks;
void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void *data);
/* Subscribe to the traced runtime and driver APIs (and, for cudaProfilerApi windows, the
 * profiler start/stop calls); write their names into the stream. */
void enable_api_callbacks(CUpti_SubscriberHandle subscriber);
/* The traced APIs' names, again (a forked child's stream is new). */
void emit_api_names(void);

/* ---- threads.c ---- */
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
    uint8_t outer_flags; /* TRACED/LAUNCH/SYNC_* of the outermost call, kept for its exit */
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
void threads_init(void);
/* Turn the staged rows into a columnar chunk (caller holds ts->lock). */
void emit_api_rows(struct thread_state *ts);
void emit_alias_rows(struct thread_state *ts);
/* Every thread's staged rows into the stream (the flush). */
void threads_flush_rows(void);
/* Only the calling thread lives on in a forked child. */
void threads_fork_child(void);

/* ---- launch_stacks.c ---- */
extern pthread_mutex_t stack_emit_lock;
int launch_stacks_init(void);
/* After the stream is up: this library's code range (not part of a stack), the Python reader. */
void launch_stacks_start(void);
/* The stack id of the current call stack (0: none), its stack sent once on first sight. */
uint32_t capture_stack(struct thread_state *ts);
void launch_stacks_fork_child(void);

/* ---- activity.c ---- */
extern pthread_mutex_t activity_lock;
int activity_init(void);
/* Buffer callbacks and attributes (before any kind is enabled). */
void activity_register(void);
/* The enabled kinds per XPU_PERF_KINDS (windows.c's enable_kind). */
void activity_enable_kinds(void);
void activity_fork_child(void);

/* ---- sync_ops.c ---- */
int sync_ops_init(void);
/* One SYNC row (caller holds activity_lock). */
void push_sync(uint64_t start, uint64_t end, uint32_t correlation_id, uint32_t context,
               uint32_t device, uint32_t stream, uint32_t type, uint32_t event_id);
/* The sync op of a finished sync call, from its callback. */
void add_api_sync(const CUpti_CallbackData *cb, uint8_t flags, uint64_t start, uint64_t end);
void emit_sync_rows(void);
void sync_ops_fork_child(void);

/* ---- nvtx.c ---- */
extern _Atomic int nvtx_used, cupti_ready, markers_enabled;
/* Set in a forked child of a process where CUPTI was set up: CUDA cannot be used in such a
 * child, and a call into CUPTI there can block for ever on a lock that one of the parent's
 * CUPTI threads held at the fork (DataLoader workers, compile workers ending through _exit
 * hung in their final flush until their parent killed them).  The child's stream still
 * carries its API rows and counters. */
extern _Atomic int cupti_forked;
/* MARKER activity on, once both CUPTI is set up and the process has used NVTX. */
void enable_markers_once(void);
/* A window opens or closes: markers follow it once the process has used NVTX. */
void markers_follow_window(int on);

/* Turn the traced APIs' callbacks on or off in CUPTI (windows.c; caller holds window_lock). */
void api_callbacks_set(int on);
/* A callback our subscriber needs on now (traced and on, or opening windows). */
int api_callback_needed(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
extern _Atomic uint32_t api_generation;

/* ---- windows.c ---- */
extern int window_mode;            /* enum xp_window_mode */
extern atomic_int window_open;     /* 1 when no window mode is on */
extern pthread_mutex_t window_lock; /* taken before the other locks wherever both are held */
void configure_windows(void);
/* Activity kind on: now without windows, else at each window's opening. */
void enable_kind(CUpti_ActivityKind kind);
void open_window(const char *reason);
void close_window(const char *end_reason);
/* After the set-up: --delay's timer (and a window already due). */
void start_windows(void);
/* After cuptiSubscribe: NVTX callbacks for --capture-range nvtx:NAME. */
void subscribe_windows(CUpti_SubscriberHandle subscriber);
/* An NVTX callback (CUPTI_CB_DOMAIN_NVTX): may open or close an NVTX window. */
void nvtx_window_callback(CUpti_CallbackId cbid, const void *data);
/* From the periodic flush: the API callbacks go off a while after a window closed. */
void windows_periodic(void);
/* At the final flush: a window still open ends with the process. */
void end_open_window(void);
void windows_fork_child(void);

/* ---- program_profiler.c ---- */
/* The program's own CUPTI client (torch.profiler's Kineto), whose calls the preloaded sampler
 * library hands over (cupti_host.h). */
extern _Atomic int program_callbacks_on; /* it has callbacks on: on_callback forwards */
extern _Atomic int program_forwarding;   /* its trace runs: completed buffers go to it too */
/* First thing at the set-up: the sampler library's interposed CUPTI calls come here. */
void program_profiler_register(void);
/* Our subscriber, which the client's callbacks are turned on for. */
void program_profiler_attach(CUpti_SubscriberHandle subscriber);
/* An activity kind on or off for us (every enable/disable of ours goes through here): on in
 * CUPTI while we or the client want it. */
CUptiResult kind_set(CUpti_ActivityKind kind, int on);
/* A kind we have enabled at some time (records of the others are the client's only). */
int kind_ours(CUpti_ActivityKind kind);
int program_wants_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void program_forward_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data);
/* A kind the client enabled in its current trace (its records are forwarded). */
int program_takes_kind(CUpti_ActivityKind kind);
/* The client registered its buffer callbacks; a buffer from its request callback (0: none),
 * handed back filled. */
int program_has_buffers(void);
int program_buffer(uint8_t **buffer, size_t *size);
void program_buffer_done(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                         size_t used);
/* PROGRAM_CUPTI rows and the forwarding counters (at the final flush). */
void emit_program_cupti(void);
void program_profiler_final(void);
void program_profiler_fork_child(void);

/* ---- program_records.c ---- */
/* The client's records of a buffer CUPTI completed, copied into its own buffers; 1: the
 * buffer is kept (a forwarded record points into it), the caller must not free it. */
int program_forward_buffer(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                           size_t valid);
void program_clock_set(CUpti_TimestampCallbackFunc clock);
/* The client's partly filled buffer handed back (at its flush); one of its buffers held, as
 * CUPTI holds one while its activity runs. */
void program_records_hand_back(void);
void program_records_hold_buffer(void);
void program_records_epoch_start(void);
void emit_program_record_counters(void);
void program_records_fork_child(void);

/* ---- pm_sampling.c ---- */
/* PM sampling when record asked for it (XPU_PERF_PM_METRICS): the metric names written, the
 * context-created callback on for our subscriber (NULL: none, the refusal said), our thread
 * started. */
void pm_sampling_start(CUpti_SubscriberHandle subscriber);
/* Set by pm_sampling_start when it turned the context-created callback on (the program's
 * own CUPTI client turning it off must leave ours on: program_profiler.c). */
extern int pm_sampling_on;
/* CUPTI_CBID_RESOURCE_CONTEXT_CREATED: sampling of the context's device wanted. */
void pm_sampling_context_created(const void *resource_data);
/* At the final flush: sampling stopped, the rest decoded, its counters written. */
void pm_sampling_final(void);
void pm_sampling_fork_child(void);

/* ---- counters.c ---- */
struct xp_counters {
    _Atomic uint64_t api_records, launches, launch_stacks, launches_no_stack, alias_records;
    _Atomic uint64_t stacks_unique, stack_table_full, cupti_dropped, activity_buffers;
    _Atomic uint64_t records_kernel, records_memcpy, records_memset, records_sync, records_marker;
    _Atomic uint64_t records_other, records_memory, records_program_only;
    _Atomic uint64_t windows_recorded, windows_ignored;
    _Atomic uint64_t subscribe_refused; /* CUPTI had a subscriber before ours: no API calls */
};
extern struct xp_counters counters;
void emit_counters(void);
void counters_reset(void);

#endif
