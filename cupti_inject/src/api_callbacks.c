/* The API callbacks: which CUDA runtime and driver APIs are traced (launches, graph launches,
 * copies, sets, syncs, allocations: not all APIs, which would cost ~19 records per PyTorch
 * kernel), and the callback CUPTI calls at each one's enter and exit.  At the outermost
 * call's enter: its correlation id, its launch stack (launch_stacks.c), the launch-site hook
 * for eBPF; at its exit: one API row on the calling thread (threads.c) and, for a sync call,
 * its sync op (sync_ops.c).  A driver call nested in a traced runtime call becomes an alias
 * row (GPU records may name either correlation id).  The profiler start/stop calls open and
 * close cudaProfilerApi capture windows (windows.c). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "api_callbacks.h"
#include "config.h"
#include "experiments.h"
#include "launch_stacks.h"
#include "pm_sampling.h"
#include "program_profiler.h"
#include "state.h"
#include "stream.h"
#include "sync_ops.h"
#include "threads.h"
#include "windows.h"

/* What a traced API is, per callback id (and the sync kind: sync_ops.h's SYNC_* bits). */
enum { TRACED = 1, LAUNCH = 2, PROFILER_START = 64, PROFILER_STOP = 128 /* cudaProfilerStart/Stop,
       cuProfiler*: windows */ };

/* Moves each time the traced APIs' callbacks come back on (api_callbacks_set). */
static _Atomic uint32_t api_generation;
static uint8_t runtime_flags[CUPTI_RUNTIME_TRACE_CBID_SIZE];
static uint8_t driver_flags[CUPTI_DRIVER_TRACE_CBID_SIZE];

/* ---- the eBPF hook ---- */
/* Called at every kernel/graph launch with its correlation id and api id (domain << 16 | cbid)
 * so that a uprobe can tie its own stack to the exact launch.  Never inlined, never elided. */
EXPORT __attribute__((noinline, used)) void xpu_perf_launch_marker(uint64_t correlation_id,
                                                                   uint32_t api_id) {
    __asm__ volatile("" : : "r"(correlation_id), "r"(api_id) : "memory");
}

void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                          CUpti_CallbackId cbid, const void *data) {
    (void)userdata;
    if (xp_exp.callback_noop) return;
    /* The program's own client (program_profiler.c) gets the callbacks it enabled first. */
    if (atomic_load_explicit(&program_callbacks_on, memory_order_relaxed))
        program_forward_callback(domain, cbid, data);
    if (domain == CUPTI_CB_DOMAIN_NVTX) {
        nvtx_window_callback(cbid, data); /* subscribed only for --capture-range nvtx:NAME */
        return;
    }
    if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
        /* on only for PM sampling (pm_sampling.c) */
        if (cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED) {
            /* PM sampling starts on its thread now; a program that ends before its first
             * traced call or flush must still run our final flush (which ends that thread)
             * before the driver's teardown, or the thread's CUPTI calls meet a torn-down
             * driver (the H200: a trivial torch program ended in SIGSEGV, exit 139). */
            threads_run_first_call_hook();
            pm_sampling_context_created(data);
        }
        return;
    }
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    const CUpti_CallbackData *cb = data;
    uint8_t f = domain == CUPTI_CB_DOMAIN_RUNTIME_API
                    ? (cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE ? runtime_flags[cbid] : 0)
                    : (cbid < CUPTI_DRIVER_TRACE_CBID_SIZE ? driver_flags[cbid] : 0);
    if (!f) return; /* on for the program's client only */
    if (window_mode != WINDOW_NONE) {
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
    uint64_t c_in = xp_cycles();
    struct thread_state *ts = thread_state();
    if (!ts) return;
    XP_SELFTIME(ts->st.callbacks++);
    if (cb->callbackSite == CUPTI_API_ENTER) {
        if (ts->depth > 0 && window_mode != WINDOW_NONE &&
            ts->api_generation != atomic_load_explicit(&api_generation, memory_order_relaxed))
            ts->depth = 0; /* its last call's exit came while the callbacks were off */
        if (ts->depth++ > 0) {
            /* A driver call made by a traced runtime call: GPU records may name either id. */
            if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
                pthread_mutex_lock(&ts->lock);
                ts->alias_rows[ts->n_alias_rows] = (struct alias_row){cb->correlationId, ts->outer_corr};
                if (++ts->n_alias_rows == XP_BATCH_ROWS) emit_alias_rows(ts);
                pthread_mutex_unlock(&ts->lock);
                ts->n_alias++;
            }
            XP_CHARGE(ts, c_in, &ts->st.cyc_nested);
            return;
        }
        uint8_t flags = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_flags[cbid] : driver_flags[cbid];
        uint32_t api_id = ((uint32_t)domain << 16) | (uint32_t)cbid;
        ts->outer_corr = cb->correlationId;
        ts->outer_api = api_id;
        ts->api_generation = atomic_load_explicit(&api_generation, memory_order_relaxed);
        ts->outer_flags = flags;
        uint64_t c_stack = xp_cycles();
        ts->outer_stack = xp_config.stacks ? capture_stack(ts) : 0;
        XP_SELFTIME({
            ts->st.outer_enters++;
            ts->st.cyc_stack += xp_cycles() - c_stack;
        });
        (void)c_stack;
        if (flags & LAUNCH) {
            xpu_perf_launch_marker(cb->correlationId, api_id);
            ts->n_launch++;
            if (ts->outer_stack) ts->n_launch_stack++; else ts->n_launch_no_stack++;
        }
        ts->outer_start = xp_now_ns();
        XP_CHARGE(ts, c_in, NULL);
        return;
    }
    /* API exit */
    if (ts->depth == 0) return;
    if (--ts->depth > 0) {
        XP_CHARGE(ts, c_in, &ts->st.cyc_nested);
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
    XP_CHARGE(ts, c_in, &ts->st.cyc_exit);
}

/* ---- which APIs ---- */
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

void emit_api_names(void) {
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

static void enable_domain(CUpti_SubscriberHandle subscriber, CUpti_CallbackDomain domain, int size,
                          uint8_t *flags, const char *const *traced) {
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
static void enable_profiler_callbacks(CUpti_SubscriberHandle subscriber) {
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

/* Outside capture windows the traced APIs' callbacks are off in CUPTI (api_callbacks_set
 * follows the windows: windows.h): a callback CUPTI does not call costs nothing, where one
 * that returns at once still costs CUPTI's dispatch at every API call.  Each time they come
 * back on, the generation (api_generation) moves: a thread whose call was entered before they
 * went off never got its exit, and its depth is stale. */
static CUpti_SubscriberHandle api_subscriber;
static int api_callbacks_on = 1;

void api_callbacks_set(int on) {
    if (on == api_callbacks_on || !api_subscriber) return;
    if (atomic_load(&cupti_forked)) return;
    for (int i = 0; i < n_api_names; i++) {
        uint32_t id = api_names[i].api_id;
        CUpti_CallbackDomain domain = (CUpti_CallbackDomain)(id >> 16);
        CUpti_CallbackId cbid = (CUpti_CallbackId)(id & 0xffffu);
        if (!on && program_wants_callback(domain, cbid)) continue; /* the program's, still */
        cuptiEnableCallback((uint32_t)on, api_subscriber, domain, cbid);
    }
    if (on) atomic_fetch_add(&api_generation, 1);
    api_callbacks_on = on;
}

int api_callback_needed(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    uint8_t f = domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE
                    ? runtime_flags[cbid]
              : domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid < CUPTI_DRIVER_TRACE_CBID_SIZE
                    ? driver_flags[cbid]
                    : 0;
    if (f & (PROFILER_START | PROFILER_STOP)) return 1;
    if (f & TRACED) return api_callbacks_on;
    /* PM sampling hears of devices from their contexts' creation (pm_sampling.c). */
    if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED)
        return pm_sampling_on;
    return domain == CUPTI_CB_DOMAIN_NVTX && window_mode == WINDOW_NVTX;
}

void enable_api_callbacks(CUpti_SubscriberHandle subscriber) {
    api_subscriber = subscriber;
    enable_domain(subscriber, CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_SIZE,
                  runtime_flags, runtime_traced);
    enable_domain(subscriber, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_SIZE,
                  driver_flags, driver_traced);
    emit_api_names();
    if (window_mode == WINDOW_PROFILER_API) enable_profiler_callbacks(subscriber);
}
