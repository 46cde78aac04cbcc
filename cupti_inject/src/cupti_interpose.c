/* The program's CUPTI entry points, interposed by the preloaded sampler library (see
 * cupti_interpose.h for why).  Each one finds who called it: the injection library (its own calls
 * go to CUPTI as they are), libcupti itself (the same), or the program, whose call is handed
 * to the host when one is registered.  Without a host (no GPU recording in this process)
 * every call goes to CUPTI unchanged.
 *
 * CUPTI's own functions are found by dlsym(RTLD_NEXT), or, where libcupti is not in the global
 * scope (the injection library's dependency, loaded RTLD_LOCAL with it), in the loaded
 * libcupti itself.  The types are CUPTI's as plain C: the sampler library is built without
 * the CUPTI headers (CUptiResult is an int enum, handles are pointers, ids 32-bit). */
#define _GNU_SOURCE
#include "cupti_interpose.h"

#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#define XP_EXPORT __attribute__((visibility("default")))
/* CUptiResult values this file answers with (cupti_result.h). */
#define CUPTI_SUCCESS 0
#define CUPTI_ERROR_NOT_INITIALIZED 15
#define CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39

static const struct xp_cupti_host *_Atomic host;

void xpu_perf_cupti_host(const struct xp_cupti_host *h) { atomic_store(&host, h); }

/* ---- CUPTI's own functions ---- */
static int find_cupti(struct dl_phdr_info *info, size_t size, void *out) {
    (void)size;
    const char *slash = strrchr(info->dlpi_name, '/');
    const char *base = slash ? slash + 1 : info->dlpi_name;
    if (strncmp(base, "libcupti.so", 11) != 0) return 0;
    *(void **)out = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
    return *(void **)out != NULL;
}

static void *cupti_function(const char *name) {
    void *f = dlsym(RTLD_NEXT, name);
    if (f) return f;
    void *cupti = NULL;
    dl_iterate_phdr(find_cupti, &cupti);
    return cupti ? dlsym(cupti, name) : NULL;
}

/* The function once found (a race finds the same pointer twice). */
#define REAL(type, name)                                                                     \
    static void *_Atomic real_##name;                                                        \
    void *found_ = atomic_load(&real_##name);                                                \
    if (!found_) {                                                                           \
        found_ = cupti_function(#name);                                                      \
        atomic_store(&real_##name, found_);                                                  \
    }                                                                                        \
    __typeof__(type) fn = (__typeof__(type))found_;

/* ---- who calls ---- */
enum caller_kind { CALLER_PROGRAM, CALLER_OURS };

static const char *module_name(const char *path) {
    if (!path) return "?";
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* The injection library and libcupti (calling its own exported functions) are not the
 * program; everything else is. */
static enum caller_kind classify(const struct xp_cupti_host *h, const void *pc,
                                 const char **module) {
    Dl_info info;
    if (!dladdr(pc, &info)) {
        *module = "?";
        return CALLER_PROGRAM;
    }
    *module = module_name(info.dli_fname);
    if (info.dli_fbase == h->base) return CALLER_OURS;
    if (strncmp(*module, "libcupti.so", 11) == 0) return CALLER_OURS;
    return CALLER_PROGRAM;
}

/* A program that starts its CUPTI client before it uses CUDA (torch.profiler entered before
 * the model moves to the GPU) would subscribe before cuInit loads the injection library, and
 * ours would be the refused one.  When this process is recorded (the injection library's
 * settings are in its environment), the program's first CUPTI call initialises CUDA first:
 * cuInit loads the injection library, which registers the host and subscribes. */
static const struct xp_cupti_host *host_after_cuda_init(const void *pc) {
    static atomic_int tried;
    if (!getenv("XPU_PERF_OUT_DIR") || !getenv("CUDA_INJECTION64_PATH")) return NULL;
    Dl_info info;
    if (dladdr(pc, &info) && strncmp(module_name(info.dli_fname), "libcupti.so", 11) == 0)
        return NULL; /* libcupti's own call */
    if (atomic_exchange(&tried, 1)) return atomic_load(&host);
    void *init = dlsym(RTLD_DEFAULT, "cuInit");
    if (!init) {
        void *cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        init = cuda ? dlsym(cuda, "cuInit") : NULL;
    }
    if (init) ((int (*)(unsigned))init)(0);
    return atomic_load(&host);
}

/* The host's answer to a program's call: 1 with *result set, or 0 (pass it to CUPTI). */
static int ask_host(const struct xp_cupti_host *h, enum xp_cupti_entry entry, const void *pc,
                    uintptr_t a0, uintptr_t a1, uintptr_t a2, uintptr_t a3, int *result) {
    if (!h) h = host_after_cuda_init(pc);
    if (!h) return 0;
    struct xp_cupti_call call = {entry, NULL, {a0, a1, a2, a3}};
    if (classify(h, pc, &call.caller) == CALLER_OURS) return 0;
    return h->program_call(&call, result);
}

#define CALLER __builtin_return_address(0)
#define HANDLED(entry, a0, a1, a2, a3)                                                       \
    int result_;                                                                             \
    if (ask_host(atomic_load(&host), entry, CALLER, (uintptr_t)(a0), (uintptr_t)(a1),        \
                 (uintptr_t)(a2), (uintptr_t)(a3), &result_))                                \
        return result_;

/* ---- the entry points ---- */
XP_EXPORT int cuptiSubscribe(void **subscriber, void *callback, void *userdata) {
    HANDLED(XP_CUPTI_SUBSCRIBE, subscriber, callback, userdata, 0);
    REAL(int (*)(void **, void *, void *), cuptiSubscribe);
    if (!fn) return CUPTI_ERROR_NOT_INITIALIZED;
    int r = fn(subscriber, callback, userdata);
    /* CUPTI's initialisation inside this call can itself run cuInit, which loads the
     * injection library: it subscribed first, and the program is its client after all. */
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        HANDLED(XP_CUPTI_SUBSCRIBE, subscriber, callback, userdata, 0);
    }
    return r;
}

/* CUDA 13's subscribe with parameters (a name, and where CUPTI names the subscriber that holds
 * it when it refuses): served as cuptiSubscribe. */
XP_EXPORT int cuptiSubscribe_v2(void **subscriber, void *callback, void *userdata, void *params) {
    HANDLED(XP_CUPTI_SUBSCRIBE_V2, subscriber, callback, userdata, params);
    REAL(int (*)(void **, void *, void *, void *), cuptiSubscribe_v2);
    if (!fn) return CUPTI_ERROR_NOT_INITIALIZED;
    int r = fn(subscriber, callback, userdata, params);
    if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        HANDLED(XP_CUPTI_SUBSCRIBE_V2, subscriber, callback, userdata, params);
    }
    return r;
}

/* Takes a subscriber handle: the served client's is ours to answer, never CUPTI's to read. */
XP_EXPORT int cuptiGetCallbackState(uint32_t *enable, void *subscriber, int domain, uint32_t cbid) {
    HANDLED(XP_CUPTI_GET_CALLBACK_STATE, enable, subscriber, domain, cbid);
    REAL(int (*)(uint32_t *, void *, int, uint32_t), cuptiGetCallbackState);
    return fn ? fn(enable, subscriber, domain, cbid) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiUnsubscribe(void *subscriber) {
    HANDLED(XP_CUPTI_UNSUBSCRIBE, subscriber, 0, 0, 0);
    REAL(int (*)(void *), cuptiUnsubscribe);
    return fn ? fn(subscriber) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiEnableCallback(uint32_t enable, void *subscriber, int domain, uint32_t cbid) {
    HANDLED(XP_CUPTI_ENABLE_CALLBACK, enable, subscriber, domain, cbid);
    REAL(int (*)(uint32_t, void *, int, uint32_t), cuptiEnableCallback);
    return fn ? fn(enable, subscriber, domain, cbid) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiEnableDomain(uint32_t enable, void *subscriber, int domain) {
    HANDLED(XP_CUPTI_ENABLE_DOMAIN, enable, subscriber, domain, 0);
    REAL(int (*)(uint32_t, void *, int), cuptiEnableDomain);
    return fn ? fn(enable, subscriber, domain) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiEnableAllDomains(uint32_t enable, void *subscriber) {
    HANDLED(XP_CUPTI_ENABLE_ALL_DOMAINS, enable, subscriber, 0, 0);
    REAL(int (*)(uint32_t, void *), cuptiEnableAllDomains);
    return fn ? fn(enable, subscriber) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityRegisterCallbacks(void *requested, void *completed) {
    HANDLED(XP_CUPTI_ACTIVITY_REGISTER_CALLBACKS, requested, completed, 0, 0);
    REAL(int (*)(void *, void *), cuptiActivityRegisterCallbacks);
    return fn ? fn(requested, completed) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityEnable(int kind) {
    HANDLED(XP_CUPTI_ACTIVITY_ENABLE, kind, 0, 0, 0);
    REAL(int (*)(int), cuptiActivityEnable);
    return fn ? fn(kind) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityDisable(int kind) {
    HANDLED(XP_CUPTI_ACTIVITY_DISABLE, kind, 0, 0, 0);
    REAL(int (*)(int), cuptiActivityDisable);
    return fn ? fn(kind) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityEnableContext(void *context, int kind) {
    HANDLED(XP_CUPTI_ACTIVITY_ENABLE_CONTEXT, context, kind, 0, 0);
    REAL(int (*)(void *, int), cuptiActivityEnableContext);
    return fn ? fn(context, kind) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityDisableContext(void *context, int kind) {
    HANDLED(XP_CUPTI_ACTIVITY_DISABLE_CONTEXT, context, kind, 0, 0);
    REAL(int (*)(void *, int), cuptiActivityDisableContext);
    return fn ? fn(context, kind) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityFlushAll(uint32_t flag) {
    HANDLED(XP_CUPTI_ACTIVITY_FLUSH_ALL, flag, 0, 0, 0);
    REAL(int (*)(uint32_t), cuptiActivityFlushAll);
    return fn ? fn(flag) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiActivityRegisterTimestampCallback(void *timestamp) {
    HANDLED(XP_CUPTI_TIMESTAMP_CALLBACK, timestamp, 0, 0, 0);
    REAL(int (*)(void *), cuptiActivityRegisterTimestampCallback);
    return fn ? fn(timestamp) : CUPTI_ERROR_NOT_INITIALIZED;
}

XP_EXPORT int cuptiFinalize(void) {
    HANDLED(XP_CUPTI_FINALIZE, 0, 0, 0, 0);
    REAL(int (*)(void), cuptiFinalize);
    return fn ? fn() : CUPTI_ERROR_NOT_INITIALIZED;
}

/* The counters' profiler API is not served (the session's activity tracing is untouched by
 * it): the call is counted and goes on to CUPTI. */
XP_EXPORT int cuptiProfilerInitialize(void *params) {
    HANDLED(XP_CUPTI_PROFILER_INITIALIZE, params, 0, 0, 0);
    REAL(int (*)(void *), cuptiProfilerInitialize);
    return fn ? fn(params) : CUPTI_ERROR_NOT_INITIALIZED;
}

/* Called per operator by Kineto while its trace is active: the host looks only while it
 * waits for an active trace to begin (one atomic load otherwise). */
XP_EXPORT int cuptiActivityPushExternalCorrelationId(int kind, uint64_t id) {
    const struct xp_cupti_host *h = atomic_load_explicit(&host, memory_order_acquire);
    if (h && h->watch_push && atomic_load_explicit(h->watch_push, memory_order_relaxed))
        h->program_push();
    REAL(int (*)(int, uint64_t), cuptiActivityPushExternalCorrelationId);
    return fn ? fn(kind, id) : CUPTI_ERROR_NOT_INITIALIZED;
}
