/* cupti_interpose.c's header: the program's own CUPTI calls, between the two libraries
 * (issue 25).
 *
 * CUPTI serves one subscriber per process.  Under `record` that is the injection library, so a
 * profiler of the program itself (torch.profiler's Kineto, a tool of its own) got
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED and no GPU activity, and nobody said so.  The
 * preloaded sampler library (cupti_interpose.c) defines the CUPTI entry points such a client
 * calls; the dynamic linker binds the program's calls (libtorch_cuda.so's, through its PLT) to
 * them before libcupti's.  Each call is handed to the host, the injection library
 * (program_profiler.c), which counts it by caller and serves it from its own CUPTI session
 * (or refuses it): the injection library's own calls pass straight through to CUPTI.
 *
 * The sampler library is built without the CUPTI headers: what crosses here is plain C.  The
 * injection library, loaded RTLD_LOCAL by libcuda, registers the host with
 * xpu_perf_cupti_host(), found with dlsym(RTLD_DEFAULT) as xpu_perf_on_exit is. */
#ifndef XPU_PERF_CUPTI_INTERPOSE_H
#define XPU_PERF_CUPTI_INTERPOSE_H

#include <stdatomic.h>
#include <stdint.h>

/* The entry points a program's CUPTI client is seen through. */
enum xp_cupti_entry {
    XP_CUPTI_SUBSCRIBE,
    XP_CUPTI_UNSUBSCRIBE,
    XP_CUPTI_ENABLE_CALLBACK,
    XP_CUPTI_ENABLE_DOMAIN,
    XP_CUPTI_ENABLE_ALL_DOMAINS,
    XP_CUPTI_ACTIVITY_REGISTER_CALLBACKS,
    XP_CUPTI_ACTIVITY_ENABLE,
    XP_CUPTI_ACTIVITY_DISABLE,
    XP_CUPTI_ACTIVITY_ENABLE_CONTEXT,
    XP_CUPTI_ACTIVITY_DISABLE_CONTEXT,
    XP_CUPTI_ACTIVITY_FLUSH_ALL,
    XP_CUPTI_TIMESTAMP_CALLBACK,
    XP_CUPTI_FINALIZE,
    XP_CUPTI_PROFILER_INITIALIZE,
    XP_CUPTI_SUBSCRIBE_V2,
    XP_CUPTI_GET_CALLBACK_STATE,
    XP_CUPTI_ENTRIES
};

static inline const char *xp_cupti_entry_name(int entry) {
    static const char *const names[XP_CUPTI_ENTRIES] = {
        "cuptiSubscribe", "cuptiUnsubscribe", "cuptiEnableCallback", "cuptiEnableDomain",
        "cuptiEnableAllDomains", "cuptiActivityRegisterCallbacks", "cuptiActivityEnable",
        "cuptiActivityDisable", "cuptiActivityEnableContext", "cuptiActivityDisableContext",
        "cuptiActivityFlushAll", "cuptiActivityRegisterTimestampCallback", "cuptiFinalize",
        "cuptiProfilerInitialize", "cuptiSubscribe_v2", "cuptiGetCallbackState"};
    return entry >= 0 && entry < XP_CUPTI_ENTRIES ? names[entry] : "?";
}

/* One call of the program: its entry, the module it came from (file name, no directory) and
 * its arguments in order, as integers (pointers, handles, kinds, ids). */
struct xp_cupti_call {
    enum xp_cupti_entry entry;
    const char *caller;
    uintptr_t arg[4];
};

struct xp_cupti_host {
    /* The injection library's load base: calls from it are its own and go to CUPTI. */
    const void *base;
    /* A program's call: 1 when the host answered it (*result set, a CUptiResult), 0 to pass
     * it on to CUPTI unchanged. */
    int (*program_call)(const struct xp_cupti_call *call, int *result);
    /* Set while the host wants the program's next cuptiActivityPushExternalCorrelationId
     * (Kineto pushes one per operator only while its trace is active: --capture-range
     * torch-profiler opens there); program_push is called for it. */
    atomic_int *watch_push;
    void (*program_push)(void);
};

/* Exported by the sampler library; the host lives as long as the process. */
__attribute__((visibility("default"))) void xpu_perf_cupti_host(const struct xp_cupti_host *host);

#endif
