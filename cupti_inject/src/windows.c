/* Capture windows (record --capture-range cudaProfilerApi, --delay/--duration): with a window
 * mode on, API calls and GPU ops are recorded only while a window is open.  Outside one the
 * cost is near zero: the API callbacks return after one flag load (no unwinding, no rows) and
 * the GPU activity kinds are disabled in CUPTI, so it produces no records at all; opening a
 * window enables them again.  GPU ops launched inside a window are kept when they finish
 * after it: CUPTI decides at launch, and the close flushes the buffers.
 *
 * Whatever opens or closes a window (the profiler API callbacks in api_callbacks.c, the delay
 * timer here) calls open_window(reason) / close_window(end_reason); each window becomes one
 * WINDOW row.  At most XPU_PERF_CAPTURE_RANGE_END windows are recorded (0: every one). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inject.h"

int window_mode = WINDOW_NONE;
atomic_int window_open = 1;
pthread_mutex_t window_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t window_start_ns;
static const char *window_reason = "";
static uint64_t window_limit; /* cudaProfilerApi: windows to record (0: every one) */
/* The activity kinds a window turns on and off (not DEVICE: device names are always wanted). */
static CUpti_ActivityKind window_kinds[8];
static int n_window_kinds;
static struct xp_batch_WINDOW *window_batch;
/* --delay/--duration: absolute CLOCK_MONOTONIC times (the same in every process of the tree,
 * from the target's start as `record` saw it); 0 duration: open until the process ends. */
static uint64_t delay_open_ns, delay_close_ns;
static atomic_int delay_thread_done;

/* Turn the window's activity kinds on or off (caller holds window_lock). */
static void set_window_kinds(int on) {
    CUptiResult (*set)(CUpti_ActivityKind) = on ? cuptiActivityEnable : cuptiActivityDisable;
    for (int i = 0; i < n_window_kinds; i++) set(window_kinds[i]);
    markers_follow_window(on); /* NVTX markers follow the window too, once NVTX is used */
}

static void push_window_row(uint64_t end, const char *end_reason) {
    struct xp_batch_WINDOW *b = window_batch;
    uint32_t r = b->rows++;
    b->start[r] = window_start_ns;
    b->end[r] = end;
    b->reason[r] = (struct xp_str){window_reason, (uint32_t)strlen(window_reason)};
    b->end_reason[r] = (struct xp_str){end_reason, (uint32_t)strlen(end_reason)};
    xp_emit_WINDOW(b); /* rare: one chunk per window */
    counters.windows_recorded++;
}

void open_window(const char *reason) {
    pthread_mutex_lock(&window_lock);
    if (atomic_load(&window_open)) {
        pthread_mutex_unlock(&window_lock);
        return; /* cudaProfilerStart inside a window (or its nested cuProfilerStart) */
    }
    if (window_limit && counters.windows_recorded >= window_limit) {
        counters.windows_ignored++; /* --capture-range-end stop / repeat:N: past the last window */
        pthread_mutex_unlock(&window_lock);
        return;
    }
    set_window_kinds(1);
    window_reason = reason;
    window_start_ns = xp_now_ns();
    atomic_store(&window_open, 1);
    pthread_mutex_unlock(&window_lock);
}

void close_window(const char *end_reason) {
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

void end_open_window(void) {
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

/* The window mode from the configuration (before any kind is enabled). */
void configure_windows(void) {
    window_mode = xp_config.window_mode;
    if (window_mode == WINDOW_PROFILER_API) {
        window_limit = xp_config.window_limit;
    } else if (window_mode == WINDOW_DELAY) {
        /* From the target's start (`record` passes its CLOCK_MONOTONIC time), else from now. */
        uint64_t t0 = xp_config.has_t0 ? xp_config.window_t0_ns : xp_now_ns();
        delay_open_ns = t0 + xp_config.window_delay_ms * 1000000ull;
        uint64_t duration_ms = xp_config.window_duration_ms;
        delay_close_ns = duration_ms ? delay_open_ns + duration_ms * 1000000ull : 0;
    }
    if (window_mode != WINDOW_NONE) {
        window_batch = calloc(1, sizeof *window_batch);
        if (window_batch) atomic_store(&window_open, 0);
        else window_mode = WINDOW_NONE; /* no memory for the rows: record everything */
    }
}

void enable_kind(CUpti_ActivityKind kind) {
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

void start_windows(void) {
    if (window_mode != WINDOW_DELAY) return;
    /* Already past the delay (--delay 0, or a process started later): open before the
     * application's first call rather than whenever the timer thread first runs. */
    uint64_t now = xp_now_ns();
    if (now >= delay_open_ns && (!delay_close_ns || now < delay_close_ns)) open_window("delay");
    start_delay_thread();
}

void windows_fork_child(void) {
    pthread_mutex_init(&window_lock, NULL);
    counters.windows_recorded = counters.windows_ignored = 0;
    if (window_batch) window_batch->rows = 0;
    /* The child's stream starts now: a window open at the fork is its window from here. */
    if (atomic_load(&window_open)) window_start_ns = xp_now_ns();
    if (window_mode == WINDOW_DELAY && !atomic_load(&delay_thread_done)) start_delay_thread();
}
