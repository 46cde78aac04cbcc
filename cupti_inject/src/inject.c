/* xpu-perf CUPTI injection library: loaded by libcuda through CUDA_INJECTION64_PATH, which
 * calls InitializeInjection() during cuInit.  It subscribes to a chosen set of CUDA runtime and
 * driver API callbacks (launches, graph launches, copies, sets, syncs, allocations: not all APIs,
 * which would cost ~19 records per PyTorch kernel), takes the launch stack at API enter, and
 * enables activity records for kernels, copies, sets, syncs and NVTX markers.  Everything goes
 * into the per-process stream (stream.h); nothing is written on the application's threads.
 *
 * Environment (set by `xpu-perf record`):
 *   XPU_PERF_OUT_DIR     directory for cupti-<pid>.xpstream (required; unset: do nothing)
 *   XPU_PERF_STACKS      0: no launch stacks (default 1)
 *   XPU_PERF_PYTHON      0: no Python frames (default 1)
 *   XPU_PERF_KINDS       comma list of kernel,memcpy,memset,sync,marker (default all)
 *   XPU_PERF_NESTED_DRIVER 0: skip driver callbacks nested in runtime calls (default 1)
 *   XPU_PERF_FLUSH_MS, XPU_PERF_QUEUE_KB: see stream.c
 *   XPU_PERF_CAPTURE_RANGE=cudaProfilerApi, XPU_PERF_CAPTURE_RANGE_END=N (windows; 0: all)
 *   XPU_PERF_WINDOW_DELAY_MS, _DURATION_MS, _T0_NS: one timed window (see configure_windows)
 * Overhead-measurement knobs only (bench/gpu_overhead.py; they break the trace):
 *   XPU_PERF_CALLBACKS=0 (activity only), XPU_PERF_TS_CALLBACK=0 (CUPTI's own timestamps, not
 *   CLOCK_MONOTONIC), XPU_PERF_PARSE=0 (activity buffers freed unread),
 *   XPU_PERF_SYNC_ACTIVITY=1 (sync ops from CUPTI's SYNCHRONIZATION records, not callbacks),
 *   XPU_PERF_BACKTRACE=1 (launch stacks by glibc backtrace(), not the cached CFI unwinder),
 *   XPU_PERF_ZEROED_BUFFERS=1, XPU_PERF_DEVICE_BUFFER_MB=N (CUPTI buffer attributes),
 *   XPU_PERF_UNWIND_PREFETCH=0 (no prefetch of the previous unwind's stack lines),
 *   XPU_PERF_CALLBACK_NOOP=1 (subscribed callbacks return at once: CUPTI's dispatch cost),
 *   XPU_PERF_DOMAINS=runtime|driver (callbacks of one API domain only),
 *   XPU_PERF_API_ACTIVITY=1 with XPU_PERF_CALLBACKS=0 (CUPTI API records, not callbacks),
 *   XPU_PERF_SELFTIME=1 (time spent in this library's API callbacks, by part, printed at exit)
 */
#define _GNU_SOURCE
#include <cupti.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "modules.h"
#include "pyframes.h"
#include "stream.h"
#include "strings.h"
#include "unwind.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_NATIVE 128
#define MAX_PYTHON 128

/* ---- the eBPF hook ---- */
/* Called at every kernel/graph launch with its correlation id and api id (domain << 16 | cbid)
 * so that a uprobe can tie its own stack to the exact launch.  Never inlined, never elided. */
EXPORT __attribute__((noinline, used)) void xpu_perf_launch_marker(uint64_t correlation_id,
                                                                   uint32_t api_id) {
    __asm__ volatile("" : : "r"(correlation_id), "r"(api_id) : "memory");
}

/* ---- configuration ---- */
static int want_stacks = 1, want_python = 1, want_nested_driver = 1, use_backtrace;
static CUpti_SubscriberHandle subscriber;
enum { TRACED = 1, LAUNCH = 2, SYNC_CONTEXT = 4, SYNC_STREAM = 8, SYNC_EVENT = 16, SYNC_WAIT = 32,
       PROFILER_START = 64, PROFILER_STOP = 128 /* cudaProfilerStart/Stop, cuProfiler*: windows */ };
#define SYNC_ANY (SYNC_CONTEXT | SYNC_STREAM | SYNC_EVENT | SYNC_WAIT)
/* Sync ops come from the API callbacks (start/end of the sync call, its stream), not from
 * CUPTI's SYNCHRONIZATION activity kind: that kind alone added ~20 points of overhead to the
 * launch-bound step on the H100 (docs/benchmarks.md) for the same facts. */
static int sync_from_callbacks;
static uint8_t runtime_flags[CUPTI_RUNTIME_TRACE_CBID_SIZE];
static uint8_t driver_flags[CUPTI_DRIVER_TRACE_CBID_SIZE];
static unsigned long self_lo, self_hi;
static void emit_api_names(void);

/* ---- counters (written at flush) ---- */
static _Atomic uint64_t api_records, launches, launch_stacks, launches_no_stack, alias_records;
static _Atomic uint64_t stacks_unique, stack_table_full, cupti_dropped, activity_buffers;
static _Atomic uint64_t records_kernel, records_memcpy, records_memset, records_sync, records_marker;
static _Atomic uint64_t records_other;

/* ---- per-thread API batches ---- */
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
    uint32_t n_api_rows, n_alias_rows;
    uint64_t outer_start;
    /* Per-thread counts (no shared cache line on the launch path); summed at flush. */
    uint64_t n_api, n_launch, n_launch_stack, n_launch_no_stack, n_alias;
    struct thread_state *next;
    struct api_row *api_rows;     /* XP_BATCH_ROWS each */
    struct alias_row *alias_rows;
    struct xp_batch_API *api;     /* columnar scratch for emitting */
    struct xp_batch_API_ALIAS *alias;
    /* XPU_PERF_SELFTIME: TSC cycles spent in each part of the callbacks, and what they did. */
    struct selftime {
        uint64_t callbacks, outer_enters, native_frames, python_frames;
        uint64_t cyc_callback, cyc_stack, cyc_unwind, cyc_python, cyc_nested, cyc_exit;
    } st;
};

static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static struct thread_state *threads;
static __thread struct thread_state *tls_state __attribute__((tls_model("initial-exec")));
static pthread_key_t thread_key;

/* Turn the staged rows into a columnar chunk (caller holds ts->lock). */
static void emit_api_rows(struct thread_state *ts) {
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

static void emit_alias_rows(struct thread_state *ts) {
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

static struct selftime exited_st; /* threads that ended (under threads_lock) */
static uint64_t selftime_tsc0, selftime_ns0;

static void selftime_add(struct selftime *into, const struct selftime *from) {
    const uint64_t *f = (const uint64_t *)from;
    uint64_t *t = (uint64_t *)into;
    for (size_t i = 0; i < sizeof *from / sizeof(uint64_t); i++) t[i] += f[i];
}

static void thread_exit(void *p) {
    struct thread_state *ts = p;
    pthread_mutex_lock(&threads_lock);
    selftime_add(&exited_st, &ts->st);
    api_records += ts->n_api;
    launches += ts->n_launch;
    launch_stacks += ts->n_launch_stack;
    launches_no_stack += ts->n_launch_no_stack;
    alias_records += ts->n_alias;
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

static void at_exit(void);
static pthread_once_t late_atexit_once = PTHREAD_ONCE_INIT;
/* atexit handlers run last-registered first: registering again at the first API call (after
 * cuInit has registered the driver's own teardown) makes our final flush run before it. */
static void register_late_atexit(void) { atexit(at_exit); }

static struct thread_state *thread_state(void) {
    struct thread_state *ts = tls_state;
    if (ts) return ts;
    pthread_once(&late_atexit_once, register_late_atexit);
    ts = calloc(1, sizeof *ts);
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
    ts->tid = (uint32_t)syscall(SYS_gettid);
    char name[17] = {0};
    prctl(PR_GET_NAME, name, 0, 0, 0);
    xp_emit_thread(ts->tid, name);
    pthread_mutex_lock(&threads_lock);
    ts->next = threads;
    threads = ts;
    pthread_mutex_unlock(&threads_lock);
    pthread_setspecific(thread_key, ts);
    tls_state = ts;
    return ts;
}

/* ---- launch stacks ---- */
#define STACK_TABLE_BITS 18
static _Atomic uint64_t *stack_table;
static pthread_mutex_t stack_emit_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xp_batch_STACK *stack_batch;

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

static int selftime;
static int callback_noop; /* XPU_PERF_CALLBACK_NOOP: CUPTI's callback dispatch alone */
static inline uint64_t cycles(void) { return selftime ? __rdtsc() : 0; }

/* XPU_PERF_SELFTIME: the cycles since c_in go to the callbacks' total and to `part`. */
static inline void charge(struct thread_state *ts, uint64_t c_in, uint64_t *part) {
    if (!selftime) return;
    uint64_t c = cycles() - c_in;
    ts->st.cyc_callback += c;
    if (part) *part += c;
}

static uint32_t capture_stack(struct selftime *st) {
    uint64_t pcs[MAX_NATIVE];
    struct xp_pyframe_key py[MAX_PYTHON];
    int n;
    uint64_t c0 = cycles();
    if (use_backtrace) { /* measurement only: glibc's unwinder in place of ours */
        void *frames[MAX_NATIVE];
        n = backtrace(frames, MAX_NATIVE);
        for (int i = 0; i < n; i++) pcs[i] = (uint64_t)(uintptr_t)frames[i];
    } else {
        n = xp_unwind(pcs, MAX_NATIVE);
    }
    int skip = 0;
    while (skip < n && pcs[skip] >= self_lo && pcs[skip] < self_hi) skip++;
    uint64_t c1 = cycles();
    int np = want_python ? xp_py_walk(py, MAX_PYTHON) : 0;
    uint64_t c2 = cycles();
    if (selftime) {
        st->cyc_unwind += c1 - c0;
        st->cyc_python += c2 - c1;
        st->native_frames += (uint64_t)(n - skip);
        st->python_frames += (uint64_t)np;
    }
    if (n - skip <= 0 && np == 0) return 0;
    /* Four independent lanes: one serial multiply chain over ~45 values cost ~100 ns. */
    uint64_t lane[4] = {0x12345678ull, 0x9abcdef0ull, 0x0fedcba9ull, 0x87654321ull};
    int k = 0;
    for (int i = skip; i < n; i++, k = (k + 1) & 3) lane[k] = mix(lane[k], pcs[i]);
    lane[k] = mix(lane[k], 0xfeedull); /* native | python boundary */
    for (int i = 0; i < np; i++, k = (k + 1) & 3)
        lane[k] = mix(mix(lane[k], py[i].code), py[i].offset);
    uint64_t h = mix(mix(mix(mix(0x5bd1e995ull, lane[0]), lane[1]), lane[2]), lane[3]);
    h = mix(h, (uint64_t)(n - skip) << 32 | (uint64_t)np);
    if (h == 0) h = 1;
    const uint64_t mask = (1ull << STACK_TABLE_BITS) - 1;
    uint64_t idx = h & mask;
    for (int probe = 0; probe < 64; probe++, idx = (idx + 1) & mask) {
        uint64_t cur = atomic_load_explicit(&stack_table[idx], memory_order_acquire);
        if (cur == h) return (uint32_t)idx + 1;
        if (cur != 0) continue;
        uint64_t expected = 0;
        if (!atomic_compare_exchange_strong(&stack_table[idx], &expected, h)) {
            if (expected == h) return (uint32_t)idx + 1;
            continue;
        }
        /* First sight of this stack: send it (cold path). */
        uint32_t pyids[MAX_PYTHON];
        for (int i = 0; i < np; i++) pyids[i] = xp_py_frame_id(py[i]);
        pthread_mutex_lock(&stack_emit_lock);
        stack_batch->rows = 1;
        stack_batch->stack_id[0] = (uint32_t)idx + 1;
        stack_batch->native_pcs[0] = (struct xp_u64list){pcs + skip, (uint32_t)(n - skip)};
        stack_batch->python_frames[0] = (struct xp_u32list){pyids, (uint32_t)np};
        xp_emit_STACK(stack_batch);
        pthread_mutex_unlock(&stack_emit_lock);
        stacks_unique++;
        return (uint32_t)idx + 1;
    }
    stack_table_full++;
    return 0;
}

/* ---- sync ops from API callbacks ---- */
/* The activity batches (filled from CUPTI's buffers, and SYNC also from API callbacks). */
static pthread_mutex_t activity_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xp_batch_KERNEL *kernel_batch;
static struct xp_batch_MEMCPY *memcpy_batch;
static struct xp_batch_MEMSET *memset_batch;
static struct xp_batch_SYNC *sync_batch;
static struct xp_batch_MARKER *marker_batch;
static struct xp_batch_DEVICE *device_batch;
#define NO_ID 0xffffffffu

/* One SYNC row, from an activity record or an API callback (caller holds activity_lock). */
static void push_sync(uint64_t start, uint64_t end, uint32_t correlation_id, uint32_t context,
                      uint32_t device, uint32_t stream, uint32_t type, uint32_t event_id) {
    struct xp_batch_SYNC *b = sync_batch;
    uint32_t r = b->rows;
    b->start[r] = start;
    b->end[r] = end;
    b->correlation_id[r] = correlation_id;
    b->context[r] = context;
    b->stream[r] = stream;
    b->sync_type[r] = type;
    b->event_id[r] = event_id;
    b->device[r] = device;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_SYNC(b);
}

static void add_api_sync(const CUpti_CallbackData *cb, uint8_t flags, uint64_t start, uint64_t end) {
    uint32_t context = NO_ID, device = NO_ID, stream = NO_ID;
    if (cb->context && cuptiGetContextId(cb->context, &context) != CUPTI_SUCCESS) context = NO_ID;
    /* The sync call's own context says which GPU it waits on (a process may drive several). */
    if (cb->context && cuptiGetDeviceId(cb->context, &device) != CUPTI_SUCCESS) device = NO_ID;
    if ((flags & (SYNC_STREAM | SYNC_WAIT)) && cb->functionParams) {
        /* cudaStreamSynchronize / cudaStreamWaitEvent / cuStream*: the stream is the first
         * parameter of each one's params struct. */
        CUstream handle = *(CUstream const *)cb->functionParams;
        uint8_t per_thread = cb->functionName && strstr(cb->functionName, "_ptsz") != NULL;
        if (!cb->context || cuptiGetStreamIdEx(cb->context, handle, per_thread, &stream) != CUPTI_SUCCESS)
            stream = NO_ID;
    }
    uint32_t type = flags & SYNC_CONTEXT ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE
                  : flags & SYNC_STREAM ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE
                  : flags & SYNC_EVENT  ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE
                                        : CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
    pthread_mutex_lock(&activity_lock);
    push_sync(start, end, cb->correlationId, context, device, stream, type, NO_ID);
    records_sync++;
    pthread_mutex_unlock(&activity_lock);
}

/* ---- capture windows (record --capture-range cudaProfilerApi, --delay/--duration) ---- */
/* With a window mode on, API calls and GPU ops are recorded only while a window is open.
 * Outside one the cost is near zero: the API callbacks return after one flag load (no
 * unwinding, no rows) and the GPU activity kinds are disabled in CUPTI, so it produces no
 * records at all; opening a window enables them again.  GPU ops launched inside a window are
 * kept when they finish after it: CUPTI decides at launch, and the close flushes the buffers. */
enum { WINDOW_NONE, WINDOW_PROFILER_API, WINDOW_DELAY };
static int window_mode = WINDOW_NONE;
/* 1 when no window mode is on: everything is recorded, as without windows. */
static atomic_int window_open = 1;
static pthread_mutex_t window_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t window_start_ns;
static const char *window_reason = "";
static uint64_t window_limit; /* cudaProfilerApi: windows to record (0: every one) */
static _Atomic uint64_t windows_recorded, windows_ignored;
/* The activity kinds a window turns on and off (not DEVICE: device names are always wanted). */
static CUpti_ActivityKind window_kinds[8];
static int n_window_kinds;
static struct xp_batch_WINDOW *window_batch;
/* --delay/--duration: absolute CLOCK_MONOTONIC times (the same in every process of the tree,
 * from the target's start as `record` saw it); 0 duration: open until the process ends. */
static uint64_t delay_open_ns, delay_close_ns;
static atomic_int delay_thread_done;
static _Atomic int nvtx_used, cupti_ready, markers_enabled;
static int kind_wanted(const char *kind);

/* Turn the window's activity kinds on or off (caller holds window_lock). */
static void set_window_kinds(int on) {
    CUptiResult (*set)(CUpti_ActivityKind) = on ? cuptiActivityEnable : cuptiActivityDisable;
    for (int i = 0; i < n_window_kinds; i++) set(window_kinds[i]);
    /* NVTX markers follow the window too, once the process has used NVTX. */
    if (nvtx_used && cupti_ready && kind_wanted("marker")) {
        set(CUPTI_ACTIVITY_KIND_MARKER);
        atomic_store(&markers_enabled, on);
    }
}

static void push_window_row(uint64_t end, const char *end_reason) {
    struct xp_batch_WINDOW *b = window_batch;
    uint32_t r = b->rows++;
    b->start[r] = window_start_ns;
    b->end[r] = end;
    b->reason[r] = (struct xp_str){window_reason, (uint32_t)strlen(window_reason)};
    b->end_reason[r] = (struct xp_str){end_reason, (uint32_t)strlen(end_reason)};
    xp_emit_WINDOW(b); /* rare: one chunk per window */
    windows_recorded++;
}

static void open_window(const char *reason) {
    pthread_mutex_lock(&window_lock);
    if (atomic_load(&window_open)) {
        pthread_mutex_unlock(&window_lock);
        return; /* cudaProfilerStart inside a window (or its nested cuProfilerStart) */
    }
    if (window_limit && windows_recorded >= window_limit) {
        windows_ignored++; /* --capture-range-end stop / repeat:N: past the last window */
        pthread_mutex_unlock(&window_lock);
        return;
    }
    set_window_kinds(1);
    window_reason = reason;
    window_start_ns = xp_now_ns();
    atomic_store(&window_open, 1);
    pthread_mutex_unlock(&window_lock);
}

static void close_window(const char *end_reason) {
    pthread_mutex_lock(&window_lock);
    if (!atomic_load(&window_open)) {
        pthread_mutex_unlock(&window_lock);
        return;
    }
    atomic_store(&window_open, 0);
    uint64_t end = xp_now_ns();
    set_window_kinds(0);
    push_window_row(end, end_reason);
    pthread_mutex_unlock(&window_lock);
    /* Hand over what CUPTI holds of this window now rather than at the next periodic pull,
     * so that a process that never opens another window loses nothing of this one. */
    cuptiActivityFlushAll(0);
}

/* At the final flush: a window still open ends with the process. */
static void end_open_window(void) {
    if (window_mode == WINDOW_NONE) return;
    pthread_mutex_lock(&window_lock);
    if (atomic_load(&window_open)) {
        atomic_store(&window_open, 0);
        push_window_row(xp_now_ns(), "exit");
    }
    pthread_mutex_unlock(&window_lock);
}

static void sleep_until(uint64_t t_ns) {
    struct timespec ts = {(time_t)(t_ns / 1000000000ull), (long)(t_ns % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0) {}
}

static void *delay_thread_main(void *arg) {
    (void)arg;
    if (delay_close_ns && xp_now_ns() >= delay_close_ns) {
        /* A process started after the window's end (the window is the tree's): no window. */
        atomic_store(&delay_thread_done, 1);
        return NULL;
    }
    sleep_until(delay_open_ns);
    open_window("delay");
    if (delay_close_ns) {
        sleep_until(delay_close_ns);
        close_window("duration");
    }
    atomic_store(&delay_thread_done, 1);
    return NULL;
}

static void start_delay_thread(void) {
    pthread_t t;
    atomic_store(&delay_thread_done, 0);
    if (pthread_create(&t, NULL, delay_thread_main, NULL) == 0) pthread_detach(t);
    else fprintf(stderr, "xpu-perf: cannot start the --delay timer thread: no window opens\n");
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

/* Read the window environment (before any kind is enabled); 0: no window mode. */
static void configure_windows(void) {
    const char *range = getenv("XPU_PERF_CAPTURE_RANGE");
    if (range && strcmp(range, "cudaProfilerApi") == 0) {
        window_mode = WINDOW_PROFILER_API;
        window_limit = env_u64("XPU_PERF_CAPTURE_RANGE_END", 1);
    } else if (getenv("XPU_PERF_WINDOW_DELAY_MS")) {
        window_mode = WINDOW_DELAY;
        /* From the target's start (`record` passes its CLOCK_MONOTONIC time), else from now. */
        uint64_t t0 = env_u64("XPU_PERF_WINDOW_T0_NS", xp_now_ns());
        delay_open_ns = t0 + env_u64("XPU_PERF_WINDOW_DELAY_MS", 0) * 1000000ull;
        uint64_t duration_ms = env_u64("XPU_PERF_WINDOW_DURATION_MS", 0);
        delay_close_ns = duration_ms ? delay_open_ns + duration_ms * 1000000ull : 0;
    }
    if (window_mode != WINDOW_NONE) {
        window_batch = calloc(1, sizeof *window_batch);
        if (window_batch) atomic_store(&window_open, 0);
        else window_mode = WINDOW_NONE; /* no memory for the rows: record everything */
    }
}

/* Activity kind `kind` on: now without windows, else at each window's opening. */
static void enable_kind(CUpti_ActivityKind kind) {
    if (window_mode == WINDOW_NONE) {
        CUptiResult r = cuptiActivityEnable(kind);
        if (r != CUPTI_SUCCESS) {
            const char *s = NULL;
            cuptiGetResultString(r, &s);
            fprintf(stderr, "xpu-perf: cuptiActivityEnable(%d) failed: %s\n", (int)kind, s ? s : "?");
        }
        return;
    }
    if (n_window_kinds < (int)(sizeof window_kinds / sizeof *window_kinds))
        window_kinds[n_window_kinds++] = kind;
}

/* ---- API callbacks ---- */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *data) {
    (void)userdata;
    if (callback_noop) return;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const CUpti_CallbackData *cb = data;
    if (window_mode != WINDOW_NONE) {
        uint8_t f = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_flags[cbid] : driver_flags[cbid];
        if (f & (PROFILER_START | PROFILER_STOP)) {
            /* A start opens at its exit, a stop closes at its entry: the outermost call of a
             * runtime call and its nested driver call acts (the stop names it), and the other
             * finds the window already in that state and does nothing. */
            if ((f & PROFILER_START) && cb->callbackSite == CUPTI_API_EXIT)
                open_window("cudaProfilerApi");
            else if ((f & PROFILER_STOP) && cb->callbackSite == CUPTI_API_ENTER)
                close_window(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "cudaProfilerStop"
                                                                   : "cuProfilerStop");
            return;
        }
        /* Outside a window: nothing, unless this closes a call entered inside one. */
        if (!atomic_load_explicit(&window_open, memory_order_relaxed)) {
            struct thread_state *t = tls_state;
            if (!t || t->depth == 0) return;
        }
    }
    uint64_t c_in = cycles();
    struct thread_state *ts = thread_state();
    if (!ts) return;
    if (selftime) ts->st.callbacks++;
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (ts->depth++ > 0) {
            /* A driver call made by a traced runtime call: GPU records may name either id. */
            if (domain == CUPTI_CB_DOMAIN_DRIVER_API && want_nested_driver) {
                pthread_mutex_lock(&ts->lock);
                ts->alias_rows[ts->n_alias_rows] = (struct alias_row){cb->correlationId, ts->outer_corr};
                if (++ts->n_alias_rows == XP_BATCH_ROWS) emit_alias_rows(ts);
                pthread_mutex_unlock(&ts->lock);
                ts->n_alias++;
            }
            charge(ts, c_in, &ts->st.cyc_nested);
            return;
        }
        uint8_t flags = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_flags[cbid] : driver_flags[cbid];
        uint32_t api_id = ((uint32_t)domain << 16) | (uint32_t)cbid;
        ts->outer_corr = cb->correlationId;
        ts->outer_api = api_id;
        ts->outer_flags = flags;
        uint64_t c_stack = cycles();
        ts->outer_stack = want_stacks ? capture_stack(&ts->st) : 0;
        if (selftime) {
            ts->st.outer_enters++;
            ts->st.cyc_stack += cycles() - c_stack;
        }
        if (flags & LAUNCH) {
            xpu_perf_launch_marker(cb->correlationId, api_id);
            ts->n_launch++;
            if (ts->outer_stack) ts->n_launch_stack++; else ts->n_launch_no_stack++;
        }
        ts->outer_start = xp_now_ns();
        charge(ts, c_in, NULL);
        return;
    }
    /* API exit */
    if (ts->depth == 0) return;
    if (--ts->depth > 0) {
        charge(ts, c_in, &ts->st.cyc_nested);
        return;
    }
    uint64_t end = xp_now_ns();
    pthread_mutex_lock(&ts->lock);
    ts->api_rows[ts->n_api_rows] =
        (struct api_row){ts->outer_corr, ts->outer_api, ts->outer_stack, 0, ts->outer_start, end};
    if (++ts->n_api_rows == XP_BATCH_ROWS) emit_api_rows(ts);
    pthread_mutex_unlock(&ts->lock);
    ts->n_api++;
    if (sync_from_callbacks && (ts->outer_flags & SYNC_ANY))
        add_api_sync(cb, ts->outer_flags, ts->outer_start, end);
    charge(ts, c_in, &ts->st.cyc_exit);
}

/* ---- activity buffers ---- */
#define ACTIVITY_BUFFER_SIZE (8u << 20)
static int zeroed_buffers; /* XPU_PERF_ZEROED_BUFFERS: hand CUPTI calloc'ed (already zero) buffers */

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = zeroed_buffers ? calloc(1, ACTIVITY_BUFFER_SIZE) : aligned_alloc(8, ACTIVITY_BUFFER_SIZE);
    *size = *buffer ? ACTIVITY_BUFFER_SIZE : 0;
    *max_records = 0;
}

static void add_kernel(const CUpti_ActivityKernel10 *k) {
    struct xp_batch_KERNEL *b = kernel_batch;
    uint32_t r = b->rows;
    b->start[r] = k->start;
    b->end[r] = k->end;
    b->correlation_id[r] = k->correlationId;
    b->device[r] = k->deviceId;
    b->context[r] = k->contextId;
    b->stream[r] = k->streamId;
    b->grid_x[r] = k->gridX;
    b->grid_y[r] = k->gridY;
    b->grid_z[r] = k->gridZ;
    b->block_x[r] = k->blockX;
    b->block_y[r] = k->blockY;
    b->block_z[r] = k->blockZ;
    b->registers[r] = k->registersPerThread;
    b->static_shared_memory[r] = k->staticSharedMemory;
    b->dynamic_shared_memory[r] = k->dynamicSharedMemory;
    b->graph_id[r] = k->graphId;
    b->graph_node_id[r] = k->graphNodeId;
    b->name_id[r] = xp_intern(k->name);
    if (++b->rows == XP_BATCH_ROWS) xp_emit_KERNEL(b);
}

/* One MEMCPY row from either copy record (CUpti_ActivityMemcpy6 and MemcpyPtoP4 name these
 * fields alike); only a peer-to-peer copy has devices of its own at each end. */
#define PUSH_MEMCPY(m, src_dev, dst_dev)                                                     \
    do {                                                                                     \
        struct xp_batch_MEMCPY *b = memcpy_batch;                                            \
        uint32_t r = b->rows;                                                                \
        b->start[r] = (m)->start;                                                            \
        b->end[r] = (m)->end;                                                                \
        b->correlation_id[r] = (m)->correlationId;                                           \
        b->device[r] = (m)->deviceId;                                                        \
        b->stream[r] = (m)->streamId;                                                        \
        b->copy_kind[r] = (m)->copyKind;                                                     \
        b->src_kind[r] = (m)->srcKind;                                                       \
        b->dst_kind[r] = (m)->dstKind;                                                       \
        b->bytes[r] = (m)->bytes;                                                            \
        b->src_device[r] = (src_dev);                                                        \
        b->dst_device[r] = (dst_dev);                                                        \
        b->graph_id[r] = (m)->graphId;                                                       \
        b->graph_node_id[r] = (m)->graphNodeId;                                              \
        if (++b->rows == XP_BATCH_ROWS) xp_emit_MEMCPY(b);                                   \
    } while (0)

static void add_memcpy(const CUpti_ActivityMemcpy6 *m) { PUSH_MEMCPY(m, m->deviceId, m->deviceId); }

static void add_p2p(const CUpti_ActivityMemcpyPtoP4 *m) { PUSH_MEMCPY(m, m->srcDeviceId, m->dstDeviceId); }

static void add_memset(const CUpti_ActivityMemset4 *m) {
    struct xp_batch_MEMSET *b = memset_batch;
    uint32_t r = b->rows;
    b->start[r] = m->start;
    b->end[r] = m->end;
    b->correlation_id[r] = m->correlationId;
    b->device[r] = m->deviceId;
    b->stream[r] = m->streamId;
    b->value[r] = m->value;
    b->bytes[r] = m->bytes;
    b->memory_kind[r] = m->memoryKind;
    b->graph_id[r] = m->graphId;
    b->graph_node_id[r] = m->graphNodeId;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_MEMSET(b);
}

static void add_sync(const CUpti_ActivitySynchronization2 *s) {
    push_sync(s->start, s->end, s->correlationId, s->contextId, NO_ID, s->streamId,
              (uint32_t)s->type, s->cudaEventId);
}

static void add_marker(const CUpti_ActivityMarker2 *m) {
    struct xp_batch_MARKER *b = marker_batch;
    uint32_t r = b->rows;
    b->timestamp[r] = m->timestamp;
    b->marker_id[r] = m->id;
    b->flags[r] = (uint32_t)m->flags;
    b->tid[r] = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
    b->name_id[r] = m->name ? xp_intern(m->name) : 0;
    b->domain_id[r] = m->domain ? xp_intern(m->domain) : 0;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_MARKER(b);
}

static void add_device(const CUpti_ActivityDevice5 *d) {
    struct xp_batch_DEVICE *b = device_batch;
    uint32_t r = b->rows;
    b->device[r] = d->id;
    const char *name = d->name ? d->name : "";
    b->name[r] = (struct xp_str){name, (uint32_t)strlen(name)};
    b->rows++;
    xp_emit_DEVICE(b); /* names point into CUPTI's buffer: encode now */
}

static void emit_activity_batches(void) {
    xp_emit_KERNEL(kernel_batch);
    xp_emit_MEMCPY(memcpy_batch);
    xp_emit_MEMSET(memset_batch);
    xp_emit_SYNC(sync_batch);
    xp_emit_MARKER(marker_batch);
}

static int parse_activity = 1;

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid) {
    (void)size;
    if (!parse_activity) valid = 0;
    pthread_mutex_lock(&activity_lock);
    activity_buffers++;
    CUpti_Activity *rec = NULL;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            add_kernel((const CUpti_ActivityKernel10 *)rec); records_kernel++; break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            add_memcpy((const CUpti_ActivityMemcpy6 *)rec); records_memcpy++; break;
        case CUPTI_ACTIVITY_KIND_MEMCPY2:
            add_p2p((const CUpti_ActivityMemcpyPtoP4 *)rec); records_memcpy++; break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
            add_memset((const CUpti_ActivityMemset4 *)rec); records_memset++; break;
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
            add_sync((const CUpti_ActivitySynchronization2 *)rec); records_sync++; break;
        case CUPTI_ACTIVITY_KIND_MARKER:
            add_marker((const CUpti_ActivityMarker2 *)rec); records_marker++; break;
        case CUPTI_ACTIVITY_KIND_DEVICE:
            add_device((const CUpti_ActivityDevice5 *)rec); break;
        default:
            records_other++; break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        cupti_dropped += dropped;
    emit_activity_batches();
    pthread_mutex_unlock(&activity_lock);
    free(buffer);
}

/* ---- flushing ---- */
static void emit_counters(void) {
    uint64_t api = api_records, launch = launches, with_stack = launch_stacks;
    uint64_t no_stack = launches_no_stack, alias = alias_records;
    pthread_mutex_lock(&threads_lock);
    for (struct thread_state *ts = threads; ts; ts = ts->next) {
        api += ts->n_api;
        launch += ts->n_launch;
        with_stack += ts->n_launch_stack;
        no_stack += ts->n_launch_no_stack;
        alias += ts->n_alias;
    }
    pthread_mutex_unlock(&threads_lock);
    xp_emit_counter("api_records", api);
    xp_emit_counter("launches", launch);
    xp_emit_counter("launches_with_stack", with_stack);
    xp_emit_counter("launches_without_stack", no_stack);
    xp_emit_counter("api_alias_records", alias);
    xp_emit_counter("stacks_unique", stacks_unique);
    xp_emit_counter("stack_table_full", stack_table_full);
    xp_emit_counter("cupti_dropped_records", cupti_dropped);
    xp_emit_counter("activity_buffers", activity_buffers);
    xp_emit_counter("records_kernel", records_kernel);
    xp_emit_counter("records_memcpy", records_memcpy);
    xp_emit_counter("records_memset", records_memset);
    xp_emit_counter("records_sync", records_sync);
    xp_emit_counter("records_marker", records_marker);
    xp_emit_counter("records_other", records_other);
    xp_emit_counter("windows", windows_recorded);
    xp_emit_counter("windows_ignored", windows_ignored);
    xp_emit_counter("unwind_cfi_misses", xp_unwind_cfi_misses);
    xp_emit_counter("unwind_fp_fallbacks", xp_unwind_fp_fallbacks);
    xp_emit_counter("python_guard_failures", xp_py_guard_failures);
    xp_emit_counter("python_frames_enabled", (uint64_t)(want_python && xp_py_enabled));
    /* Python frames wanted, CPython found, but not a layout this library reads: 3.x's x. */
    xp_emit_counter("python_unsupported_minor",
                    want_python && xp_py_minor && !xp_py_enabled ? xp_py_minor : 0);
}

/* One line on stderr: where the library's own callback time goes, per outermost API call. */
static void report_selftime(void) {
    struct selftime t = {0};
    pthread_mutex_lock(&threads_lock);
    selftime_add(&t, &exited_st);
    for (struct thread_state *ts = threads; ts; ts = ts->next) selftime_add(&t, &ts->st);
    pthread_mutex_unlock(&threads_lock);
    uint64_t dtsc = __rdtsc() - selftime_tsc0, dns = xp_now_ns() - selftime_ns0;
    double ns_per_cycle = dtsc ? (double)dns / (double)dtsc : 0;
    double per = t.outer_enters ? ns_per_cycle / (double)t.outer_enters : 0;
    fprintf(stderr,
            "xpu-perf selftime pid %d: %llu callbacks, %llu outer API calls; ns per outer call: "
            "callbacks %.0f = outer enter %.0f (stack %.0f: unwind %.0f, python %.0f, dedupe %.0f) "
            "+ nested calls %.0f + outer exit %.0f; "
            "frames per call: native %.1f, python %.1f\n",
            (int)getpid(), (unsigned long long)t.callbacks, (unsigned long long)t.outer_enters,
            per * (double)t.cyc_callback,
            per * (double)(t.cyc_callback - t.cyc_nested - t.cyc_exit), per * (double)t.cyc_stack,
            per * (double)t.cyc_unwind, per * (double)t.cyc_python,
            per * (double)(t.cyc_stack - t.cyc_unwind - t.cyc_python),
            per * (double)t.cyc_nested, per * (double)t.cyc_exit,
            t.outer_enters ? (double)t.native_frames / (double)t.outer_enters : 0,
            t.outer_enters ? (double)t.python_frames / (double)t.outer_enters : 0);
}

static void flush_hook(int final) {
    cuptiActivityFlushAll(final ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
    pthread_mutex_lock(&threads_lock);
    for (struct thread_state *ts = threads; ts; ts = ts->next) {
        pthread_mutex_lock(&ts->lock);
        emit_api_rows(ts);
        emit_alias_rows(ts);
        pthread_mutex_unlock(&ts->lock);
    }
    pthread_mutex_unlock(&threads_lock);
    xp_modules_emit_if_changed();
    if (final) end_open_window();
    if (final) emit_counters();
    if (final && selftime) report_selftime();
}

static void at_exit(void) { xp_stream_flush(1); }

/* SIGTERM/SIGINT with the default action: flush on a helper thread, then die as asked. */
static sem_t signal_sem;
static atomic_int signal_flush_done;
static int signal_thread_started;

static void *signal_flush_main(void *arg) {
    (void)arg;
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
    pthread_mutex_init(&stack_emit_lock, NULL);
    pthread_mutex_init(&threads_lock, NULL);
    pthread_mutex_init(&activity_lock, NULL);
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
        keep->tid = (uint32_t)syscall(SYS_gettid);
        keep->depth = 0;
        memset(&keep->st, 0, sizeof keep->st);
        char name[17] = {0};
        prctl(PR_GET_NAME, name, 0, 0, 0);
        xp_emit_thread(keep->tid, name);
    }
    memset((void *)stack_table, 0, sizeof(uint64_t) << STACK_TABLE_BITS);
    xp_strings_reset();
    xp_modules_reset();
    kernel_batch->rows = memcpy_batch->rows = memset_batch->rows = 0;
    sync_batch->rows = marker_batch->rows = 0;
    api_records = launches = launch_stacks = launches_no_stack = alias_records = 0;
    stacks_unique = stack_table_full = cupti_dropped = activity_buffers = 0;
    records_kernel = records_memcpy = records_memset = records_sync = records_marker = 0;
    records_other = 0;
    memset(&exited_st, 0, sizeof exited_st);
    pthread_mutex_init(&window_lock, NULL);
    windows_recorded = windows_ignored = 0;
    if (window_batch) window_batch->rows = 0;
    /* The child's stream starts now: a window open at the fork is its window from here. */
    if (atomic_load(&window_open)) window_start_ns = xp_now_ns();
    if (window_mode == WINDOW_DELAY && !atomic_load(&delay_thread_done)) start_delay_thread();
    emit_api_names(); /* the child's stream is new: it needs the names too */
    if (signal_thread_started) start_signal_thread();
}

/* ---- setup ---- */
static int name_has_prefix(const char *name, const char *const *prefixes) {
    for (; *prefixes; prefixes++)
        if (strncmp(name, *prefixes, strlen(*prefixes)) == 0) return 1;
    return 0;
}

static const char *const runtime_traced[] = {
    "cudaLaunch", "cudaGraphLaunch", "cudaMemcpy", "cudaMemset", "cudaDeviceSynchronize",
    "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent", "cudaMalloc",
    "cudaFree", "cudaHostAlloc", NULL};
static const char *const driver_traced[] = {
    "cuLaunch", "cuGraphLaunch", "cuMemcpy", "cuMemset", "cuCtxSynchronize",
    "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent", "cuMemAlloc", "cuMemFree",
    "cuMemHostAlloc", NULL};
static const char *const launch_prefixes[] = {
    "cudaLaunchKernel", "cudaLaunchCooperativeKernel", "cudaGraphLaunch", "cuLaunchKernel",
    "cuLaunchCooperativeKernel", "cuGraphLaunch", "cuLaunchGrid", NULL};

/* The names of the traced APIs, kept to be written again into a forked child's fresh stream
 * (CUPTI's name strings are static). */
#define MAX_API_NAMES 1024
static struct { uint32_t api_id; const char *name; } api_names[MAX_API_NAMES];
static int n_api_names;

static void emit_api_names(void) {
    struct xp_batch_API_NAME *names = malloc(sizeof *names);
    if (!names) return;
    names->rows = 0;
    for (int i = 0; i < n_api_names; i++) {
        uint32_t r = names->rows++;
        names->api_id[r] = api_names[i].api_id;
        names->name[r] = (struct xp_str){api_names[i].name, (uint32_t)strlen(api_names[i].name)};
        if (names->rows == XP_BATCH_ROWS) xp_emit_API_NAME(names);
    }
    xp_emit_API_NAME(names);
    free(names);
}

static uint8_t sync_flags(const char *name) {
    static const char *const context[] = {"cudaDeviceSynchronize", "cuCtxSynchronize", NULL};
    static const char *const stream[] = {"cudaStreamSynchronize", "cuStreamSynchronize", NULL};
    static const char *const event[] = {"cudaEventSynchronize", "cuEventSynchronize", NULL};
    static const char *const wait[] = {"cudaStreamWaitEvent", "cuStreamWaitEvent", NULL};
    return name_has_prefix(name, context) ? SYNC_CONTEXT
         : name_has_prefix(name, stream)  ? SYNC_STREAM
         : name_has_prefix(name, event)   ? SYNC_EVENT
         : name_has_prefix(name, wait)    ? SYNC_WAIT : 0;
}

static void enable_domain(CUpti_CallbackDomain domain, int size, uint8_t *flags,
                          const char *const *traced) {
    for (int cbid = 1; cbid < size && n_api_names < MAX_API_NAMES; cbid++) {
        const char *name = NULL;
        if (cuptiGetCallbackName(domain, (uint32_t)cbid, &name) != CUPTI_SUCCESS || !name) continue;
        if (!name_has_prefix(name, traced)) continue;
        if (cuptiEnableCallback(1, subscriber, domain, (CUpti_CallbackId)cbid) != CUPTI_SUCCESS) continue;
        flags[cbid] = TRACED | (name_has_prefix(name, launch_prefixes) ? LAUNCH : 0) | sync_flags(name);
        api_names[n_api_names].api_id = ((uint32_t)domain << 16) | (uint32_t)cbid;
        api_names[n_api_names].name = name;
        n_api_names++;
    }
}

/* cudaProfilerStart/Stop and the driver's cuProfilerStart/Stop (which the runtime calls, and
 * which driver-API programs call directly) open and close the windows; they are not traced. */
static void enable_profiler_callbacks(void) {
    static const struct { CUpti_CallbackDomain domain; CUpti_CallbackId cbid; uint8_t flag; } cbs[] = {
        {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000, PROFILER_START},
        {CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000, PROFILER_STOP},
        {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, PROFILER_START},
        {CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, PROFILER_STOP},
    };
    for (size_t i = 0; i < sizeof cbs / sizeof *cbs; i++) {
        if (cuptiEnableCallback(1, subscriber, cbs[i].domain, cbs[i].cbid) != CUPTI_SUCCESS) {
            fprintf(stderr, "xpu-perf: cannot subscribe to the profiler start/stop callbacks: "
                            "no capture window opens\n");
            return;
        }
        uint8_t *flags = cbs[i].domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_flags : driver_flags;
        flags[cbs[i].cbid] |= cbs[i].flag;
    }
}

static int kind_wanted(const char *kind);

/* Measurement only (XPU_PERF_API_ACTIVITY=1 with XPU_PERF_CALLBACKS=0): CUPTI's own API
 * activity records for the traced APIs, in place of callbacks, to price that path.  Looked
 * up, not linked, so a CUPTI without per-API activity control still loads this library. */
static void enable_api_activity(CUpti_CallbackDomain domain, int size, const char *const *traced,
                                const char *setter) {
    CUptiResult (*enable)(CUpti_CallbackId, uint8_t) =
        (CUptiResult(*)(CUpti_CallbackId, uint8_t))dlsym(RTLD_DEFAULT, setter);
    if (!enable) return;
    for (int cbid = 1; cbid < size; cbid++) {
        const char *name = NULL;
        if (cuptiGetCallbackName(domain, (uint32_t)cbid, &name) != CUPTI_SUCCESS || !name) continue;
        if (name_has_prefix(name, traced)) enable((CUpti_CallbackId)cbid, 1);
    }
}

/* MARKER activity: on once both CUPTI is set up and the process has used NVTX. */
static void enable_markers_once(void) {
    if (!getenv("XPU_PERF_OUT_DIR") || !kind_wanted("marker")) return;
    if (window_mode != WINDOW_NONE) {
        /* Markers follow the windows: on now only inside one (set_window_kinds does the rest). */
        pthread_mutex_lock(&window_lock);
        if (atomic_load(&window_open) && !atomic_exchange(&markers_enabled, 1))
            cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER);
        pthread_mutex_unlock(&window_lock);
        return;
    }
    if (!atomic_exchange(&markers_enabled, 1)) cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MARKER);
}

static int env_flag(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    return strcmp(v, "0") != 0;
}

static int kind_wanted(const char *kind) {
    const char *v = getenv("XPU_PERF_KINDS");
    if (!v || !*v) return 1;
    const char *p = strstr(v, kind);
    return p != NULL;
}

static uint64_t CUPTIAPI timestamp_callback(void) { return xp_now_ns(); }

#define CHECK(call)                                                                          \
    do {                                                                                     \
        CUptiResult r_ = (call);                                                             \
        if (r_ != CUPTI_SUCCESS) {                                                           \
            const char *s_ = NULL;                                                           \
            cuptiGetResultString(r_, &s_);                                                   \
            fprintf(stderr, "xpu-perf: %s failed: %s\n", #call, s_ ? s_ : "?");             \
        }                                                                                    \
    } while (0)

EXPORT int InitializeInjection(void) {
    static int initialized;
    if (initialized) return 1;
    initialized = 1;
    if (!getenv("XPU_PERF_OUT_DIR")) return 1;
    want_stacks = env_flag("XPU_PERF_STACKS", 1);
    want_python = env_flag("XPU_PERF_PYTHON", 1);
    want_nested_driver = env_flag("XPU_PERF_NESTED_DRIVER", 1);
    use_backtrace = env_flag("XPU_PERF_BACKTRACE", 0);
    xp_unwind_prefetch = env_flag("XPU_PERF_UNWIND_PREFETCH", 1);
    selftime = env_flag("XPU_PERF_SELFTIME", 0);
    callback_noop = env_flag("XPU_PERF_CALLBACK_NOOP", 0);
    selftime_tsc0 = __rdtsc();
    selftime_ns0 = xp_now_ns();
    stack_table = calloc((size_t)1 << STACK_TABLE_BITS, sizeof(uint64_t));
    stack_batch = malloc(sizeof *stack_batch);
    kernel_batch = calloc(1, sizeof *kernel_batch);
    memcpy_batch = calloc(1, sizeof *memcpy_batch);
    memset_batch = calloc(1, sizeof *memset_batch);
    sync_batch = calloc(1, sizeof *sync_batch);
    marker_batch = calloc(1, sizeof *marker_batch);
    device_batch = calloc(1, sizeof *device_batch);
    if (!stack_table || !stack_batch || !kernel_batch || !memcpy_batch || !memset_batch ||
        !sync_batch || !marker_batch || !device_batch)
        return 1;
    if (xp_stream_start() != 0) return 1;
    pthread_key_create(&thread_key, thread_exit);
    xp_modules_self_range((const void *)&on_callback, &self_lo, &self_hi);
    if (want_python) xp_py_init();

    parse_activity = env_flag("XPU_PERF_PARSE", 1);
    if (env_flag("XPU_PERF_TS_CALLBACK", 1))
        CHECK(cuptiActivityRegisterTimestampCallback(timestamp_callback));
    CHECK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
    zeroed_buffers = env_flag("XPU_PERF_ZEROED_BUFFERS", 0);
    if (zeroed_buffers) {
        /* CUPTI then skips zeroing each new buffer itself on the thread that asked for it. */
        uint8_t one = 1;
        size_t sz = sizeof one;
        CHECK(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER, &sz, &one));
    }
    const char *device_mb = getenv("XPU_PERF_DEVICE_BUFFER_MB");
    if (device_mb && atoi(device_mb) > 0) {
        size_t bytes = (size_t)atoi(device_mb) << 20, sz = sizeof bytes;
        CHECK(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz, &bytes));
    }
    CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    if (env_flag("XPU_PERF_HW_TRACE", 0)) {
        /* Hardware-event tracing of kernels/copies where the GPU supports it (looked up, not
         * linked, so an older CUPTI without it still loads this library). */
        CUptiResult (*hw)(uint8_t) = (CUptiResult(*)(uint8_t))dlsym(RTLD_DEFAULT, "cuptiActivityEnableHWTrace");
        if (hw) CHECK(hw(1));
    }
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DEVICE));
    configure_windows();
    if (kind_wanted("kernel")) {
        /* XPU_PERF_SERIAL_KERNELS=1 (measurement only): CUPTI's KERNEL kind, which serializes
           the application's kernels, in place of CONCURRENT_KERNEL; same record layout. */
        enable_kind(env_flag("XPU_PERF_SERIAL_KERNELS", 0) ? CUPTI_ACTIVITY_KIND_KERNEL
                                                            : CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    }
    if (kind_wanted("memcpy")) {
        enable_kind(CUPTI_ACTIVITY_KIND_MEMCPY);
        enable_kind(CUPTI_ACTIVITY_KIND_MEMCPY2);
    }
    if (kind_wanted("memset")) enable_kind(CUPTI_ACTIVITY_KIND_MEMSET);
    int callbacks = env_flag("XPU_PERF_CALLBACKS", 1);
    if (kind_wanted("sync")) {
        if (callbacks && !env_flag("XPU_PERF_SYNC_ACTIVITY", 0)) sync_from_callbacks = 1;
        else enable_kind(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    }
    cupti_ready = 1;
    if (nvtx_used) enable_markers_once();

    if (!callbacks && env_flag("XPU_PERF_API_ACTIVITY", 0)) {
        enable_api_activity(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE,
                            runtime_traced, "cuptiActivityEnableRuntimeApi");
        enable_api_activity(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE,
                            driver_traced, "cuptiActivityEnableDriverApi");
    }
    if (callbacks) { /* 0: activity only (overhead measurements) */
        CHECK(cuptiSubscribe(&subscriber, on_callback, NULL));
        /* XPU_PERF_DOMAINS=runtime|driver: one callback domain only (measurement only). */
        const char *domains = getenv("XPU_PERF_DOMAINS");
        if (!domains || strcmp(domains, "driver") != 0)
            enable_domain(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE, runtime_flags, runtime_traced);
        if (!domains || strcmp(domains, "runtime") != 0)
            enable_domain(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE, driver_flags, driver_traced);
        emit_api_names();
        if (window_mode == WINDOW_PROFILER_API) enable_profiler_callbacks();
    }
    if (window_mode == WINDOW_DELAY) {
        /* Already past the delay (--delay 0, or a process started later): open before the
         * application's first call rather than whenever the timer thread first runs. */
        uint64_t now = xp_now_ns();
        if (now >= delay_open_ns && (!delay_close_ns || now < delay_close_ns)) open_window("delay");
        start_delay_thread();
    }

    xp_stream_set_flush_hook(flush_hook);
    xp_modules_emit_if_changed();
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    start_signal_thread();
    install_signal_handlers();
    atexit(at_exit);
    return 1;
}

/* NVTX_INJECTION64_PATH points here: hand NVTX to the libcupti this library is linked with,
 * so NVTX ranges and markers become CUPTI MARKER records.  NVTX calls this at the process's
 * first NVTX call, so the MARKER activity kind is turned on only in processes that use NVTX:
 * enabled up front it cost ~5% on the launch-bound step, which has no NVTX ranges. */
EXPORT int InitializeInjectionNvtx2(const void *get_export_table) {
    Dl_info info;
    if (!dladdr((const void *)&cuptiSubscribe, &info) || !info.dli_fname) return 0;
    void *cupti = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!cupti) return 0;
    int (*init)(const void *) = (int (*)(const void *))dlsym(cupti, "InitializeInjectionNvtx2");
    int ok = init ? init(get_export_table) : 0;
    nvtx_used = 1;
    if (cupti_ready) enable_markers_once();
    return ok;
}
