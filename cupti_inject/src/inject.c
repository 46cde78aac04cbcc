/* xpu-perf CUPTI injection library: loaded by libcuda through CUDA_INJECTION64_PATH, which
 * calls InitializeInjection() during cuInit.  This file is the entry point, the order of
 * the set-up (switches, stream, activity, windows, callbacks, then lifecycle.c's flush hook,
 * exit, signal and fork handling) and its wiring: what a lower file tells an upper one, it
 * tells through what it is handed here (threads_init's hook, the windows' followers,
 * program_profiler_attach's test).  What each step does is in its own file and its header,
 * and no file calls back into this one (docs/ARCHITECTURE.md, `cupti_inject/`
 * under "Modules", has the files from the bottom up).  Everything goes into the per-process
 * stream (stream.h); nothing is written on the application's threads.  The switches are read
 * once (config.c); docs/ARCHITECTURE.md has their table. */
#define _GNU_SOURCE
#include "state.h"
#include "activity.h"
#include "api_callbacks.h"
#include "config.h"
#include "experiments.h"
#include "launch_stacks.h"
#include "lifecycle.h"
#include "nvtx.h"
#include "pm_sampling.h"
#include "program_profiler.h"
#include "stream.h"
#include "threads.h"
#include "windows.h"

static CUpti_SubscriberHandle subscriber;

/* ---- set-up ---- */
EXPORT int InitializeInjection(void) {
    static int initialized;
    if (initialized) return 1;
    initialized = 1;
    if (!xp_config_read()) return 1; /* no XPU_PERF_OUT_DIR: not recorded */
    /* Before our first CUPTI call: the preloaded sampler library tells our calls from the
     * program's own from here on (program_profiler.c). */
    program_profiler_register();
    xp_experiments_read();
    int stacks = launch_stacks_init(), activity = activity_init();
    if (stacks != 0 || activity != 0) return 1;
    if (xp_stream_start() != 0) return 1;
    threads_init(register_late_atexit_once);
    launch_stacks_start();

    activity_register();
    configure_windows();
    windows_subscribe(WINDOW_FOLLOW_ACTIVITY, markers_follow_window);
    activity_enable_kinds();
    cupti_ready = 1;
    if (nvtx_used) enable_markers_once();

    int subscribed = 0;
    if (xp_exp.callbacks) { /* 0: activity only (overhead measurements) */
        CUptiResult r = cuptiSubscribe(&subscriber, on_callback, NULL);
        if (r == CUPTI_SUCCESS) {
            program_profiler_attach(subscriber, api_callback_needed);
            enable_api_callbacks(subscriber);
            windows_subscribe(WINDOW_FOLLOW_CALLBACKS, api_callbacks_set);
            windows_enable_nvtx(subscriber);
            subscribed = 1;
        } else {
            /* The program's own CUPTI client subscribed first (before cuInit loaded us). */
            counters.subscribe_refused = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
            const char *s = NULL;
            cuptiGetResultString(r, &s);
            fprintf(stderr, "xpu-perf: cuptiSubscribe failed: %s\n", s ? s : "?");
        }
    }
    start_windows();
    /* GPU counters (XPU_PERF_PM_METRICS): the devices come with their contexts' callbacks. */
    pm_sampling_start(subscribed ? subscriber : NULL);

    lifecycle_start();
    return 1;
}
