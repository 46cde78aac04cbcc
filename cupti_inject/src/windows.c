/* Capture windows (record --capture-range cudaProfilerApi|nvtx:NAME|signal|torch-profiler,
 * --delay/--duration): with a window
 * mode on, API calls and GPU ops are recorded only while a window is open.  Outside one the
 * cost is near zero: the API callbacks return after one flag load (no unwinding, no rows) and
 * the GPU activity kinds are disabled in CUPTI, so it produces no records at all; opening a
 * window enables them again.  GPU ops launched inside a window are kept when they finish
 * after it: CUPTI decides at launch, and the close flushes the buffers.
 *
 * Whatever opens or closes a window (the profiler API callbacks in api_callbacks.c, the NVTX
 * callbacks through nvtx_window.c, the program's torch.profiler trace through
 * program_profiler.c, the delay timer and the control-page poll here) calls
 * open_window(reason) / close_window(end_reason); each window becomes one WINDOW row.  At most
 * XPU_PERF_CAPTURE_RANGE_END windows are recorded (0: every one).  Each open window counts in
 * the control page's process_windows (window_control.h), which the CPU sampler of every
 * process of the tree follows. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "windows.h"
#include "config.h"
#include "kinds.h"
#include "nvtx_window.h"
#include "state.h"
#include "stream.h"
#include "window_control.h"

/* --capture-range signal: how often the control page is read for record's toggles. */
#define TREE_POLL_MS 10
/* The API callbacks stay on this long after a window closes (then go off at the next periodic
 * flush), so that a call in flight at the close, on any thread, still gets its exit. */
#define CALLBACKS_OFF_AFTER_NS 500000000ull

int window_mode = WINDOW_NONE;
atomic_int window_open = 1;
pthread_mutex_t window_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t window_start_ns;
static uint64_t window_closed_ns; /* 0: the API callbacks are already off (or on in a window) */
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
static const char *range_reason = ""; /* the NVTX windows' reason: "nvtx:NAME" as given */
/* What follows the windows (windows.h), by kind of following. */
#define MAX_FOLLOWERS 4
static void (*followers[WINDOW_FOLLOWS][MAX_FOLLOWERS])(int on);
static int n_followers[WINDOW_FOLLOWS];

/* Caller holds window_lock. */
static void tell_followers(enum xp_window_follow what, int on) {
    for (int i = 0; i < n_followers[what]; i++) followers[what][i](on);
}

void windows_subscribe(enum xp_window_follow what, void (*on_change)(int on)) {
    pthread_mutex_lock(&window_lock);
    if (n_followers[what] < MAX_FOLLOWERS) followers[what][n_followers[what]++] = on_change;
    else fprintf(stderr, "xpu-perf: too many window followers (MAX_FOLLOWERS): one left out\n");
    /* The API callbacks are off until a window opens. */
    if (what == WINDOW_FOLLOW_CALLBACKS && window_mode != WINDOW_NONE && !atomic_load(&window_open))
        on_change(0);
    pthread_mutex_unlock(&window_lock);
}

/* The windows open in this process, as the CPU samplers of the tree see them. */
static void count_process_window(int delta) {
    struct xp_window_control *c = xp_window_control();
    if (c) atomic_fetch_add(&c->process_windows, delta);
}

/* Turn the window's activity kinds on or off (caller holds window_lock). */
static void set_window_kinds(int on) {
    if (atomic_load(&cupti_forked)) return; /* the window still opens: API rows, samples */
    for (int i = 0; i < n_window_kinds; i++) kind_set(window_kinds[i], on);
    tell_followers(WINDOW_FOLLOW_ACTIVITY, on); /* NVTX markers, once NVTX is used */
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
    tell_followers(WINDOW_FOLLOW_CALLBACKS, 1);
    window_closed_ns = 0;
    window_reason = reason;
    window_start_ns = xp_now_ns();
    atomic_store(&window_open, 1);
    count_process_window(1);
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
    window_closed_ns = end;
    set_window_kinds(0);
    push_window_row(end, end_reason);
    count_process_window(-1);
    pthread_mutex_unlock(&window_lock);
    /* Hand over what CUPTI holds of this window now rather than at the next periodic pull,
     * so that a process that never opens another window loses nothing of this one. */
    if (!atomic_load(&cupti_forked)) cuptiActivityFlushAll(0);
}

void end_open_window(void) {
    if (window_mode == WINDOW_NONE) return;
    pthread_mutex_lock(&window_lock);
    if (atomic_load(&window_open)) {
        atomic_store(&window_open, 0);
        push_window_row(xp_now_ns(), "exit");
        count_process_window(-1);
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

/* --capture-range signal: `record` opens and closes the tree's window on the control page;
 * this thread follows it.  Two toggles within one poll leave no window (nothing ran in it). */
static void *tree_thread_main(void *arg) {
    struct xp_window_control *c = arg;
    struct timespec pause_for = {0, TREE_POLL_MS * 1000000L};
    /* Act on changes of record's state only: an opening refused past --capture-range-end is
     * counted once, not at every poll. */
    int seen = atomic_load(&window_open);
    for (;;) {
        int want = atomic_load_explicit(&c->tree_open, memory_order_acquire) != 0;
        if (want != seen) {
            if (want) open_window("signal");
            else close_window("signal");
            seen = want;
        }
        nanosleep(&pause_for, NULL);
    }
    return NULL;
}

static void start_tree_thread(void) {
    struct xp_window_control *c = xp_window_control();
    pthread_t t;
    if (!c) {
        fprintf(stderr, "xpu-perf: no window control page (XPU_PERF_WINDOW_CONTROL): no capture "
                        "window opens in this process\n");
        return;
    }
    if (pthread_create(&t, NULL, tree_thread_main, c) == 0) pthread_detach(t);
    else fprintf(stderr, "xpu-perf: cannot start the window thread: no capture window opens\n");
}

/* The window mode from the configuration (before any kind is enabled). */
void configure_windows(void) {
    window_mode = xp_config.window_mode;
    if (window_mode == WINDOW_PROFILER_API || window_mode == WINDOW_TREE ||
        window_mode == WINDOW_PROGRAM_PROFILER) {
        window_limit = xp_config.window_limit;
    } else if (window_mode == WINDOW_NVTX) {
        window_limit = xp_config.window_limit;
        range_reason = xp_config.window_range;
        if (xp_nvtx_window_configure(range_reason + strlen("nvtx:")) != 0) {
            fprintf(stderr, "xpu-perf: --capture-range %s: not an NVTX range name: recording "
                            "nothing\n", range_reason);
        }
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
        CUptiResult r = kind_set(kind, 1);
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

void windows_periodic(void) {
    if (window_mode == WINDOW_NONE || atomic_load(&cupti_forked)) return;
    pthread_mutex_lock(&window_lock);
    if (!atomic_load(&window_open) && window_closed_ns &&
        xp_now_ns() - window_closed_ns >= CALLBACKS_OFF_AFTER_NS) {
        tell_followers(WINDOW_FOLLOW_CALLBACKS, 0);
        window_closed_ns = 0;
    }
    pthread_mutex_unlock(&window_lock);
}

/* After cuptiSubscribe and the traced APIs' callbacks (which a window follower turns off
 * until a window opens): the callbacks the NVTX window mode needs stay on. */
void windows_enable_nvtx(CUpti_SubscriberHandle subscriber) {
    if (window_mode != WINDOW_NVTX) return;
    if (xp_nvtx_window_enable(subscriber) != CUPTI_SUCCESS)
        fprintf(stderr, "xpu-perf: cannot subscribe to the NVTX callbacks: no capture window "
                        "opens\n");
}

void nvtx_window_callback(CUpti_CallbackId cbid, const void *data) {
    if (window_mode != WINDOW_NVTX) return;
    switch (xp_nvtx_window_event(cbid, data)) {
    case XP_NVTX_OPEN: open_window(range_reason); break;
    case XP_NVTX_CLOSE: close_window("range end"); break;
    case XP_NVTX_NONE: break;
    }
}

void start_windows(void) {
    if (window_mode == WINDOW_TREE) {
        struct xp_window_control *c = xp_window_control();
        if (c && atomic_load(&c->tree_open)) open_window("signal"); /* started inside one */
        start_tree_thread();
        return;
    }
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
    /* The child's stream starts now: a window open at the fork is its window from here, and
     * counts as one more open window until the child closes it. */
    if (window_mode != WINDOW_NONE && atomic_load(&window_open)) {
        window_start_ns = xp_now_ns();
        count_process_window(1);
    }
    if (window_mode == WINDOW_DELAY && !atomic_load(&delay_thread_done)) start_delay_thread();
    if (window_mode == WINDOW_TREE) start_tree_thread(); /* threads do not survive a fork */
}
