/* A test double of libcupti.so.13 for CI machines without a GPU.
 *
 * It implements the CUPTI entry points that cupti_inject uses, plus a few fake "CUDA API" calls
 * (fake_launch_kernel, fake_graph_launch, ...) that a test program calls.  Each fake call runs the
 * subscribed API callbacks exactly as CUPTI does (enter, nested driver call, exit) and queues the
 * activity records CUPTI would deliver; flushes hand them over in buffers obtained from the
 * client's buffer-request callback.  Knobs (environment):
 *   FAKE_CUPTI_RECORDS_PER_BUFFER  records per delivered buffer (default 1000): small values
 *                                  exercise many buffer-full completions
 *   fake_set_dropped(n)            the next completed buffer reports n dropped records
 * cuptiActivityEnable/Disable are honoured: a GPU op launched while its kind is off makes no
 * record (what `record`'s capture windows rely on).
 * One subscriber, as CUPTI: a second cuptiSubscribe gets CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
 * (the program's own profiler under `record`: fake_profiler_client.c plays one).
 * NVTX: fake_nvtx_* play the NVTX library's side.  As the real one, the first call loads
 * NVTX_INJECTION64_PATH and calls its InitializeInjectionNvtx2 (which hands NVTX to CUPTI's);
 * from then on each call runs the subscriber's enabled NVTX-domain callbacks with CUPTI's
 * parameter structs (generated_nvtx_meta.h) and return values (push depth, range id, domain
 * and registered-string handles).  No MARKER records are made.
 * fork: as with the real driver, CUDA is unusable in a forked child of the process that
 * initialised it, and so is CUPTI: on the H100 a CUPTI call there (the final flush of a
 * DataLoader worker ending through _exit) blocked on a lock one of the parent's CUPTI threads
 * held at the fork, until the parent killed the worker.  Any CUPTI or fake CUDA call in such a
 * child blocks 2 s and aborts with a message. */
#define _GNU_SOURCE
#include <cupti.h>
#include <generated_nvtx_meta.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

static pid_t cuda_pid; /* the process that ran fake_cuInit */

static void refuse_forked_child(const char *call) {
    if (!cuda_pid || getpid() == cuda_pid) return;
    fprintf(stderr, "fake_cupti: %s in a forked child of the process that initialised CUDA\n",
            call);
    sleep(2);
    abort();
}
#define FORK_CHECK() refuse_forked_child(__func__)
/* fake_pm_sampling.c's calls check the same. */
void fake_fork_check(const char *call) { refuse_forked_child(call); }

static CUpti_CallbackFunc subscriber_cb;
static void *subscriber_data;
static uint8_t enabled_runtime[CUPTI_RUNTIME_TRACE_CBID_SIZE];
static uint8_t enabled_driver[CUPTI_DRIVER_TRACE_CBID_SIZE];
static uint8_t enabled_nvtx[CUPTI_CBID_NVTX_SIZE];
static uint8_t enabled_kinds[128];
static CUpti_BuffersCallbackRequestFunc request_cb;
static CUpti_BuffersCallbackCompleteFunc complete_cb;
static CUpti_TimestampCallbackFunc timestamp_cb;
static _Atomic uint32_t next_correlation = 1;
static uint8_t context_created_on; /* CUPTI_CBID_RESOURCE_CONTEXT_CREATED enabled */
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static size_t pending_dropped;

union record {
    CUpti_Activity base;
    CUpti_ActivityKernel10 kernel;
    CUpti_ActivityMemcpy6 memcpy;
    CUpti_ActivityMemcpyPtoP4 p2p;
    CUpti_ActivityMemset4 memset;
    CUpti_ActivitySynchronization2 sync;
    CUpti_ActivityDevice5 device;
    CUpti_ActivityMemory4 memory;
};
static union record *pending;
static size_t pending_count, pending_cap;

static size_t record_size(CUpti_ActivityKind kind) {
    switch (kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2: return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: return sizeof(CUpti_ActivitySynchronization2);
    case CUPTI_ACTIVITY_KIND_DEVICE: return sizeof(CUpti_ActivityDevice5);
    case CUPTI_ACTIVITY_KIND_MEMORY2: return sizeof(CUpti_ActivityMemory4);
    default: return 0;
    }
}

/* As CUPTI: the registered timestamp callback's clock, else CLOCK_REALTIME. */
static uint64_t now(void) {
    if (timestamp_cb) return timestamp_cb();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

EXPORT CUptiResult cuptiGetTimestamp(uint64_t *timestamp) {
    if (!timestamp) return CUPTI_ERROR_INVALID_PARAMETER;
    *timestamp = now();
    return CUPTI_SUCCESS;
}

/* As CUPTI, a buffer is asked for when records start to come and held until it is handed
 * back (a client such as Kineto flushes only while CUPTI holds one of its buffers). */
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *held;
static size_t held_size;

static void hold_buffer(void) {
    pthread_mutex_lock(&held_lock);
    if (!held && request_cb) {
        size_t max_records = 0;
        request_cb(&held, &held_size, &max_records);
    }
    pthread_mutex_unlock(&held_lock);
}

/* The held buffer, or a new one. */
static uint8_t *take_buffer(size_t *size) {
    pthread_mutex_lock(&held_lock);
    uint8_t *buf = held;
    *size = held_size;
    held = NULL;
    pthread_mutex_unlock(&held_lock);
    if (!buf) {
        size_t max_records = 0;
        request_cb(&buf, size, &max_records);
    }
    return buf;
}

static void queue_record(const union record *r) {
    if (!enabled_kinds[r->base.kind]) return;
    hold_buffer();
    pthread_mutex_lock(&pending_lock);
    if (pending_count == pending_cap) {
        pending_cap = pending_cap ? pending_cap * 2 : 1024;
        pending = realloc(pending, pending_cap * sizeof *pending);
    }
    pending[pending_count++] = *r;
    pthread_mutex_unlock(&pending_lock);
}

/* ---- CUPTI entry points used by cupti_inject ---- */
EXPORT CUptiResult cuptiGetResultString(CUptiResult result, const char **str) {
    *str = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (fake)";
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc f) {
    FORK_CHECK();
    timestamp_cb = f;
    return CUPTI_SUCCESS;
}
/* Buffer attributes are accepted (size-checked) and have no effect on the replay. */
EXPORT CUptiResult cuptiActivitySetAttribute(CUpti_ActivityAttribute attr, size_t *size, void *value) {
    FORK_CHECK();
    if (!size || !value) return CUPTI_ERROR_INVALID_PARAMETER;
    if (attr == CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER) return *size == 1 ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
    if (attr == CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE) return *size == sizeof(size_t) ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_ERROR_NOT_SUPPORTED;
}
EXPORT CUptiResult cuptiSetThreadIdType(CUpti_ActivityThreadIdType type) {
    FORK_CHECK();
    (void)type;
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
                                                  CUpti_BuffersCallbackCompleteFunc done) {
    FORK_CHECK();
    request_cb = req;
    complete_cb = done;
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind) {
    FORK_CHECK();
    if (record_size(kind) == 0) return CUPTI_ERROR_NOT_COMPATIBLE;
    enabled_kinds[kind] = 1;
    return CUPTI_SUCCESS;
}
/* As CUPTI: a disabled kind produces no records from then on (those queued stay queued). */
EXPORT CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind) {
    FORK_CHECK();
    if (record_size(kind) == 0) return CUPTI_ERROR_NOT_COMPATIBLE;
    enabled_kinds[kind] = 0;
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *s, CUpti_CallbackFunc cb, void *ud) {
    FORK_CHECK();
    if (subscriber_cb) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    subscriber_cb = cb;
    subscriber_data = ud;
    *s = (CUpti_SubscriberHandle)&subscriber_cb;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle s) {
    FORK_CHECK();
    if (!subscriber_cb || s != (CUpti_SubscriberHandle)&subscriber_cb) return CUPTI_ERROR_INVALID_PARAMETER;
    subscriber_cb = NULL;
    return CUPTI_SUCCESS;
}

/* Kineto pushes one external correlation id per operator while its trace is active (no
 * EXTERNAL_CORRELATION records are made here). */
EXPORT CUptiResult cuptiActivityPushExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t id) {
    FORK_CHECK();
    (void)kind;
    (void)id;
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiActivityPopExternalCorrelationId(CUpti_ExternalCorrelationKind kind, uint64_t *id) {
    FORK_CHECK();
    (void)kind;
    if (id) *id = 0;
    return CUPTI_SUCCESS;
}

static const char *runtime_name(uint32_t cbid) {
    switch (cbid) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000: return "cudaLaunchKernel_v7000"; /* as CUPTI names it */
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020: return "cudaMemcpyAsync";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020: return "cudaMemsetAsync";
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020: return "cudaDeviceSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020: return "cudaStreamSynchronize";
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000: return "cudaGraphLaunch";
    case CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020: return "cudaGetDevice";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: return "cudaMalloc_v3020";
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020: return "cudaFree_v3020";
    case CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020: return "cudaMallocAsync_v11020";
    case CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020: return "cudaFreeAsync_v11020";
    case CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000: return "cudaProfilerStart_v4000";
    case CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000: return "cudaProfilerStop_v4000";
    default: return NULL;
    }
}
static const char *driver_name(uint32_t cbid) {
    switch (cbid) {
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: return "cuLaunchKernel";
    case CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2: return "cuMemcpyHtoDAsync_v2";
    case CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice: return "cuCtxGetDevice";
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: return "cuMemAlloc_v2";
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: return "cuMemFree_v2";
    case CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize: return "cuStreamSynchronize";
    case CUPTI_DRIVER_TRACE_CBID_cuProfilerStart: return "cuProfilerStart";
    case CUPTI_DRIVER_TRACE_CBID_cuProfilerStop: return "cuProfilerStop";
    default: return NULL;
    }
}

EXPORT CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain domain, uint32_t cbid, const char **name) {
    FORK_CHECK();
    *name = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_name(cbid)
          : domain == CUPTI_CB_DOMAIN_DRIVER_API ? driver_name(cbid) : NULL;
    return *name ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}
EXPORT CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle s,
                                       CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    FORK_CHECK();
    (void)s;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API && cbid < CUPTI_RUNTIME_TRACE_CBID_SIZE) enabled_runtime[cbid] = (uint8_t)enable;
    else if (domain == CUPTI_CB_DOMAIN_DRIVER_API && cbid < CUPTI_DRIVER_TRACE_CBID_SIZE) enabled_driver[cbid] = (uint8_t)enable;
    else if (domain == CUPTI_CB_DOMAIN_NVTX && cbid < CUPTI_CBID_NVTX_SIZE) enabled_nvtx[cbid] = (uint8_t)enable;
    else if (domain == CUPTI_CB_DOMAIN_RESOURCE && cbid == CUPTI_CBID_RESOURCE_CONTEXT_CREATED)
        context_created_on = (uint8_t)enable;
    else return CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_SUCCESS;
}
EXPORT CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle s, CUpti_CallbackDomain domain) {
    FORK_CHECK();
    (void)s;
    if (domain != CUPTI_CB_DOMAIN_NVTX) return CUPTI_ERROR_NOT_SUPPORTED;
    memset(enabled_nvtx, enable ? 1 : 0, sizeof enabled_nvtx);
    return CUPTI_SUCCESS;
}

/* Records in a delivered buffer are prefixed by their size (the fake's own layout). */
EXPORT CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid, CUpti_Activity **record) {
    FORK_CHECK();
    uint8_t *p;
    if (*record == NULL) p = buffer;
    else {
        uint64_t size;
        memcpy(&size, (uint8_t *)*record - 8, 8);
        p = (uint8_t *)*record + size;
    }
    if (p + 8 > buffer + valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
    *record = (CUpti_Activity *)(p + 8);
    return CUPTI_SUCCESS;
}

static __thread size_t reported_dropped;
EXPORT CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *dropped) {
    FORK_CHECK();
    (void)ctx;
    (void)stream;
    *dropped = reported_dropped;
    reported_dropped = 0;
    return CUPTI_SUCCESS;
}

static void deliver_all(void) {
    static pthread_mutex_t deliver_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&deliver_lock);
    pthread_mutex_lock(&pending_lock);
    union record *recs = pending;
    size_t count = pending_count;
    size_t dropped = pending_dropped;
    pending = NULL;
    pending_count = pending_cap = 0;
    pending_dropped = 0;
    pthread_mutex_unlock(&pending_lock);
    const char *per = getenv("FAKE_CUPTI_RECORDS_PER_BUFFER");
    size_t per_buffer = per && atoi(per) > 0 ? (size_t)atoi(per) : 1000;
    size_t i = 0;
    while (i < count || dropped) {
        size_t size = 0;
        uint8_t *buf = take_buffer(&size);
        size_t used = 0, n = 0;
        while (i < count && n < per_buffer) {
            size_t rs = record_size(recs[i].base.kind);
            if (used + 8 + rs > size) break;
            uint64_t s64 = rs;
            memcpy(buf + used, &s64, 8);
            memcpy(buf + used + 8, &recs[i], rs);
            used += 8 + ((rs + 7) & ~(size_t)7);
            i++;
            n++;
        }
        reported_dropped = dropped;
        dropped = 0;
        complete_cb(NULL, 0, buf, size, used);
    }
    free(recs);
    pthread_mutex_unlock(&deliver_lock);
}

EXPORT CUptiResult cuptiActivityFlushAll(uint32_t flag) {
    FORK_CHECK();
    extern int fake_final_flush_seen; /* fake_pm_sampling.c */
    if (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) fake_final_flush_seen = 1;
    if (complete_cb) deliver_all();
    return CUPTI_SUCCESS;
}

/* ---- fake CUDA: what a test program calls ---- */
/* The current API call's parameter struct (what CUpti_CallbackData.functionParams points to). */
static _Thread_local const void *call_params;
/* One context per device; the calling thread's current device picks it (fake_set_device). */
#define FAKE_DEVICES 2
#define FAKE_CONTEXT_OF(device) ((CUcontext)(uintptr_t)(0xc0de + (device)))
static _Thread_local uint32_t current_device;
static int fake_device_of(CUcontext ctx, uint32_t *device) {
    uintptr_t v = (uintptr_t)ctx;
    if (v < 0xc0de || v >= 0xc0de + FAKE_DEVICES) return 0;
    *device = (uint32_t)(v - 0xc0de);
    return 1;
}
EXPORT void fake_set_device(uint32_t device) { current_device = device % FAKE_DEVICES; }
#define FAKE_STREAM_HANDLE(id) ((CUstream)(uintptr_t)(0x5000 + (id)))

/* API callbacks delivered to the subscriber: a disabled callback costs CUPTI nothing, and a
 * test can tell "disabled" from "filtered by the subscriber". */
static _Atomic uint64_t callbacks_delivered;
EXPORT uint64_t fake_callbacks_delivered(void) { return callbacks_delivered; }

static void run_callback(CUpti_CallbackDomain domain, uint32_t cbid, CUpti_ApiCallbackSite site,
                         uint32_t correlation, uint64_t *correlation_data) {
    uint8_t on = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? enabled_runtime[cbid] : enabled_driver[cbid];
    if (!subscriber_cb || !on) return;
    callbacks_delivered++;
    CUpti_CallbackData data;
    memset(&data, 0, sizeof data);
    data.callbackSite = site;
    data.functionName = domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_name(cbid) : driver_name(cbid);
    data.correlationId = correlation;
    data.correlationData = correlation_data;
    data.functionParams = call_params;
    data.context = FAKE_CONTEXT_OF(current_device);
    data.contextUid = 1 + current_device;
    subscriber_cb(subscriber_data, domain, cbid, &data);
}

/* As the driver: a device's (primary) context is created at the first call that needs it,
 * which the subscriber hears of in the resource domain (not counted as an API callback). */
static _Atomic uint8_t context_made[FAKE_DEVICES];
static void make_context(void) {
    if (atomic_exchange(&context_made[current_device], 1)) return;
    if (!subscriber_cb || !context_created_on) return;
    CUpti_ResourceData data;
    memset(&data, 0, sizeof data);
    data.context = FAKE_CONTEXT_OF(current_device);
    subscriber_cb(subscriber_data, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_CONTEXT_CREATED,
                  &data);
}

/* One API call: runtime call (with a nested driver call when driver_cbid != 0) or driver only.
 * Returns the correlation id that GPU records carry (the outermost call's). */
static uint32_t api_call(uint32_t runtime_cbid, uint32_t driver_cbid, uint64_t busy_ns) {
    FORK_CHECK();
    make_context();
    uint64_t rt_data = 0, drv_data = 0;
    uint32_t outer = 0;
    if (runtime_cbid) {
        outer = atomic_fetch_add(&next_correlation, 1);
        run_callback(CUPTI_CB_DOMAIN_RUNTIME_API, runtime_cbid, CUPTI_API_ENTER, outer, &rt_data);
    }
    uint32_t drv = 0;
    if (driver_cbid) {
        drv = atomic_fetch_add(&next_correlation, 1);
        run_callback(CUPTI_CB_DOMAIN_DRIVER_API, driver_cbid, CUPTI_API_ENTER, drv, &drv_data);
    }
    uint64_t t0 = now();
    while (now() - t0 < busy_ns) {}
    if (driver_cbid) run_callback(CUPTI_CB_DOMAIN_DRIVER_API, driver_cbid, CUPTI_API_EXIT, drv, &drv_data);
    if (runtime_cbid) run_callback(CUPTI_CB_DOMAIN_RUNTIME_API, runtime_cbid, CUPTI_API_EXIT, outer, &rt_data);
    return runtime_cbid ? outer : drv;
}

static void kernel_record_for(const char *name, uint32_t stream, uint32_t correlation,
                              uint32_t graph, uint64_t node, uint64_t dur_ns) {
    union record r;
    memset(&r, 0, sizeof r);
    r.kernel.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
    uint64_t t = now();
    r.kernel.start = t + 1000;
    r.kernel.end = t + 1000 + dur_ns;
    r.kernel.deviceId = current_device;
    r.kernel.contextId = 1 + current_device;
    r.kernel.streamId = stream;
    r.kernel.gridX = 128; r.kernel.gridY = 1; r.kernel.gridZ = 1;
    r.kernel.blockX = 256; r.kernel.blockY = 1; r.kernel.blockZ = 1;
    r.kernel.registersPerThread = 32;
    r.kernel.staticSharedMemory = 1024;
    r.kernel.dynamicSharedMemory = 0;
    r.kernel.correlationId = correlation;
    r.kernel.graphId = graph;
    r.kernel.graphNodeId = node;
    r.kernel.name = name; /* callers pass string literals: valid for the process's life */
    queue_record(&r);
}

static void kernel_record(const char *name, uint32_t stream, uint32_t correlation, uint32_t graph,
                          uint64_t node) {
    kernel_record_for(name, stream, correlation, graph, node, 5000);
}

EXPORT void fake_cuInit(void) {
    static int done;
    if (done) return;
    done = 1;
    cuda_pid = getpid();
    const char *path = getenv("CUDA_INJECTION64_PATH");
    if (!path) return;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "fake_cupti: %s\n", dlerror()); return; }
    int (*init)(void) = (int (*)(void))dlsym(h, "InitializeInjection");
    if (init) init();
    union record r;
    memset(&r, 0, sizeof r);
    r.device.kind = CUPTI_ACTIVITY_KIND_DEVICE;
    r.device.id = 0;
    r.device.name = "Fake GPU 9000";
    queue_record(&r);
    r.device.id = 1;
    r.device.name = "Fake GPU 9001";
    queue_record(&r);
}

/* The driver's cuInit, as the preloaded sampler library finds it by name (a program whose
 * profiler starts before it uses CUDA: cupti_interpose.c initialises CUDA first). */
EXPORT CUresult CUDAAPI cuInit(unsigned int flags) {
    (void)flags;
    fake_cuInit();
    return CUDA_SUCCESS;
}

/* driver_only: a launch straight through the driver API (as Triton does). */
EXPORT uint32_t fake_launch_kernel(const char *name, uint32_t stream, int driver_only) {
    uint32_t c = driver_only ? api_call(0, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 200)
                             : api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                                        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 200);
    kernel_record(name, stream, c, 0, 0);
    return c;
}

/* A runtime launch of a kernel that runs dur_ns on the GPU (it may end after the call's
 * capture window). */
EXPORT uint32_t fake_launch_kernel_for(const char *name, uint32_t stream, uint64_t dur_ns) {
    uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
                          CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, 200);
    kernel_record_for(name, stream, c, 0, 0, dur_ns);
    return c;
}

EXPORT uint32_t fake_graph_launch(uint32_t graph_id, int kernels, uint32_t stream) {
    uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, 0, 500);
    for (int i = 0; i < kernels; i++) kernel_record("graph_kernel", stream, c, graph_id, (uint64_t)(i + 1));
    return c;
}

EXPORT uint32_t fake_memcpy_h2d(uint64_t bytes, uint32_t stream) {
    uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
                          CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, 300);
    union record r;
    memset(&r, 0, sizeof r);
    r.memcpy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
    r.memcpy.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    r.memcpy.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    r.memcpy.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    r.memcpy.bytes = bytes;
    uint64_t t = now();
    r.memcpy.start = t + 500;
    r.memcpy.end = t + 2500;
    r.memcpy.streamId = stream;
    r.memcpy.correlationId = c;
    queue_record(&r);
    return c;
}

EXPORT uint32_t fake_memset(uint64_t bytes, uint32_t value, uint32_t stream) {
    uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, 0, 100);
    union record r;
    memset(&r, 0, sizeof r);
    r.memset.kind = CUPTI_ACTIVITY_KIND_MEMSET;
    r.memset.value = value;
    r.memset.bytes = bytes;
    uint64_t t = now();
    r.memset.start = t + 300;
    r.memset.end = t + 800;
    r.memset.streamId = stream;
    r.memset.correlationId = c;
    r.memset.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    queue_record(&r);
    return c;
}

EXPORT uint32_t fake_device_synchronize(void) {
    uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020, 0, 1000);
    union record r;
    memset(&r, 0, sizeof r);
    r.sync.kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
    r.sync.type = CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE;
    uint64_t t = now();
    r.sync.start = t - 900;
    r.sync.end = t;
    r.sync.correlationId = c;
    r.sync.contextId = 1 + current_device;
    r.sync.streamId = 0xffffffffu;
    queue_record(&r);
    return c;
}

/* cudaStreamSynchronize(stream): no SYNCHRONIZATION record is needed when the injection
 * library derives sync ops from its API callbacks (it asks for the stream id below). */
EXPORT uint32_t fake_stream_synchronize(uint32_t stream) {
    struct { CUstream stream; } params = {FAKE_STREAM_HANDLE(stream)}; /* as CUDA's params struct */
    call_params = &params;
    uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
                          CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, 2000);
    call_params = NULL;
    return c;
}

EXPORT CUptiResult cuptiGetStreamIdEx(CUcontext ctx, CUstream stream, uint8_t per_thread,
                                      uint32_t *id) {
    FORK_CHECK();
    (void)per_thread;
    uint32_t device;
    if (!fake_device_of(ctx, &device) || (uintptr_t)stream < 0x5000) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = (uint32_t)((uintptr_t)stream - 0x5000);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetContextId(CUcontext ctx, uint32_t *id) {
    FORK_CHECK();
    uint32_t device;
    if (!fake_device_of(ctx, &device)) return CUPTI_ERROR_INVALID_PARAMETER;
    *id = 1 + device;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetDeviceId(CUcontext ctx, uint32_t *id) {
    FORK_CHECK();
    if (!fake_device_of(ctx, id)) return CUPTI_ERROR_INVALID_PARAMETER;
    return CUPTI_SUCCESS;
}

/* Device memory: cudaMalloc (a nested cuMemAlloc_v2, whose correlation id the MEMORY2 record
 * carries, as the driver does it), cudaFree, and the stream-ordered cudaMallocAsync/
 * cudaFreeAsync (the runtime call's id).  Addresses are handed out as the driver would: never
 * two live blocks at one address, a freed address reused. */
static uint64_t next_address = 0x7f2000000000ull;
static void memory_record(uint32_t correlation, CUpti_ActivityMemoryOperationType op,
                          uint64_t address, uint64_t bytes, uint32_t stream, uint32_t is_async) {
    union record r;
    memset(&r, 0, sizeof r);
    r.memory.kind = CUPTI_ACTIVITY_KIND_MEMORY2;
    r.memory.memoryOperationType = op;
    r.memory.memoryKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    r.memory.correlationId = correlation;
    r.memory.address = address;
    r.memory.bytes = bytes;
    r.memory.timestamp = now();
    r.memory.deviceId = current_device;
    r.memory.contextId = 1 + current_device;
    r.memory.streamId = stream;
    r.memory.isAsync = is_async;
    queue_record(&r);
}

EXPORT uint64_t fake_malloc(uint64_t bytes, int async, uint32_t stream) {
    uint64_t address = next_address;
    next_address += (bytes + 0xfffff) & ~0xfffffull;
    if (async) {
        uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020, 0, 300);
        memory_record(c, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, address, bytes, stream, 1);
    } else {
        uint32_t before = atomic_load(&next_correlation);
        api_call(CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020, CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, 300);
        memory_record(before + 1, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION, address, bytes, 0, 0);
    }
    return address;
}

EXPORT void fake_free(uint64_t address, uint64_t bytes, int async, uint32_t stream) {
    if (async) {
        uint32_t c = api_call(CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, 0, 200);
        memory_record(c, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, address, bytes, stream, 1);
    } else {
        uint32_t before = atomic_load(&next_correlation);
        api_call(CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2, 200);
        memory_record(before + 1, CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE, address, bytes, 0, 0);
    }
}

/* An API that cupti_inject must not trace. */
EXPORT void fake_get_device(void) { api_call(CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020, 0, 10); }

/* The next completed buffer reports n records dropped. */
EXPORT void fake_set_dropped(size_t n) {
    pthread_mutex_lock(&pending_lock);
    pending_dropped += n;
    pthread_mutex_unlock(&pending_lock);
}

/* cudaProfilerStart/Stop (torch.cuda.profiler.start/stop), which call cuProfilerStart/Stop as
 * the runtime does; driver_only: the driver's calls alone. */
EXPORT void fake_profiler_start(int driver_only) {
    api_call(driver_only ? 0 : CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStart_v4000,
             CUPTI_DRIVER_TRACE_CBID_cuProfilerStart, 10);
}
EXPORT void fake_profiler_stop(int driver_only) {
    api_call(driver_only ? 0 : CUPTI_RUNTIME_TRACE_CBID_cudaProfilerStop_v4000,
             CUPTI_DRIVER_TRACE_CBID_cuProfilerStop, 10);
}

/* ---- fake NVTX (the NVTX library's side) ---- */
static int nvtx_injected; /* CUPTI's InitializeInjectionNvtx2 was called */

/* What the injection library forwards NVTX to: from here on NVTX calls reach CUPTI. */
EXPORT int InitializeInjectionNvtx2(const void *get_export_table) {
    (void)get_export_table;
    nvtx_injected = 1;
    return 1;
}

/* The NVTX library's first call: load the tool named by NVTX_INJECTION64_PATH. */
static void nvtx_load_tool(void) {
    static int tried;
    if (tried) return;
    tried = 1;
    const char *path = getenv("NVTX_INJECTION64_PATH");
    if (!path) return;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) { fprintf(stderr, "fake_nvtx: %s\n", dlerror()); return; }
    int (*init)(const void *) = (int (*)(const void *))dlsym(h, "InitializeInjectionNvtx2");
    if (init) init(NULL);
}

static void nvtx_callback(uint32_t cbid, const char *name, const void *params, const void *ret) {
    nvtx_load_tool();
    if (!nvtx_injected || !subscriber_cb || !enabled_nvtx[cbid]) return;
    CUpti_NvtxData data;
    memset(&data, 0, sizeof data);
    data.functionName = name;
    data.functionParams = params;
    data.functionReturnValue = ret;
    subscriber_cb(subscriber_data, CUPTI_CB_DOMAIN_NVTX, cbid, &data);
}

static _Thread_local int nvtx_depth;
static _Atomic uint64_t next_range_id = 1;

static nvtxEventAttributes_t ascii_attrib(const char *message) {
    nvtxEventAttributes_t a;
    memset(&a, 0, sizeof a);
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = message;
    return a;
}

EXPORT int fake_nvtx_range_push(const char *message) {
    nvtxRangePushA_params p = {message};
    int depth = nvtx_depth++;
    nvtx_callback(CUPTI_CBID_NVTX_nvtxRangePushA, "nvtxRangePushA", &p, &depth);
    return depth;
}
EXPORT int fake_nvtx_range_push_ex(const char *message) {
    nvtxEventAttributes_t a = ascii_attrib(message);
    nvtxRangePushEx_params p = {&a};
    int depth = nvtx_depth++;
    nvtx_callback(CUPTI_CBID_NVTX_nvtxRangePushEx, "nvtxRangePushEx", &p, &depth);
    return depth;
}
EXPORT int fake_nvtx_range_pop(void) {
    int depth = --nvtx_depth;
    nvtx_callback(CUPTI_CBID_NVTX_nvtxRangePop, "nvtxRangePop", NULL, &depth);
    return depth;
}
EXPORT uint64_t fake_nvtx_range_start(const char *message) {
    nvtxRangeStartA_params p = {message};
    nvtxRangeId_t id = atomic_fetch_add(&next_range_id, 1);
    nvtx_callback(CUPTI_CBID_NVTX_nvtxRangeStartA, "nvtxRangeStartA", &p, &id);
    return id;
}
EXPORT void fake_nvtx_range_end(uint64_t id) {
    nvtxRangeEnd_params p = {id};
    nvtx_callback(CUPTI_CBID_NVTX_nvtxRangeEnd, "nvtxRangeEnd", &p, NULL);
}

/* Domains: handles are the addresses of these slots (as opaque as NVTX's). */
static struct { char name[64]; } fake_domains[8];
static int n_fake_domains;
EXPORT void *fake_nvtx_domain_create(const char *name) {
    nvtxDomainCreateA_params p = {name};
    nvtxDomainHandle_t h = NULL;
    if (n_fake_domains < 8) {
        snprintf(fake_domains[n_fake_domains].name, sizeof fake_domains[0].name, "%s", name);
        h = (nvtxDomainHandle_t)&fake_domains[n_fake_domains++];
    }
    nvtx_callback(CUPTI_CBID_NVTX_nvtxDomainCreateA, "nvtxDomainCreateA", &p, &h);
    return h;
}
/* A registered string: NVTX3's C++ ranges name themselves by one. */
EXPORT void *fake_nvtx_domain_register_string(void *domain, const char *string) {
    static char copies[16][64];
    static int n;
    nvtxDomainRegisterStringA_params p = {(nvtxDomainHandle_t)domain, string};
    nvtxStringHandle_t h = NULL;
    if (n < 16) {
        snprintf(copies[n], sizeof copies[0], "%s", string);
        h = (nvtxStringHandle_t)copies[n++];
    }
    nvtx_callback(CUPTI_CBID_NVTX_nvtxDomainRegisterStringA, "nvtxDomainRegisterStringA", &p, &h);
    return h;
}
/* A domain push named by `message` (ascii) or, when `registered` is not NULL, by that handle. */
EXPORT int fake_nvtx_domain_range_push(void *domain, const char *message, void *registered) {
    nvtxEventAttributes_t a = ascii_attrib(message);
    if (registered) {
        a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
        a.message.registered = (nvtxStringHandle_t)registered;
    }
    nvtxDomainRangePushEx_params p = {(nvtxDomainHandle_t)domain, {&a}};
    int depth = nvtx_depth++;
    nvtx_callback(CUPTI_CBID_NVTX_nvtxDomainRangePushEx, "nvtxDomainRangePushEx", &p, &depth);
    return depth;
}
EXPORT int fake_nvtx_domain_range_pop(void *domain) {
    nvtxDomainRangePop_params p = {(nvtxDomainHandle_t)domain};
    int depth = --nvtx_depth;
    nvtx_callback(CUPTI_CBID_NVTX_nvtxDomainRangePop, "nvtxDomainRangePop", &p, &depth);
    return depth;
}
