/* The program's own profiler, as torch.profiler's Kineto uses CUPTI, for the fake CUPTI: what
 * `record` must detect, count and serve (cupti_inject/src/program_profiler.c).
 *
 * Per trace (a schedule cycle): subscribe (first trace only) with a callback on
 * cudaLaunchKernel, a timestamp callback of its own (2 * CLOCK_MONOTONIC + 12345: a clock
 * unlike ours, so a record left in ours is seen; FAKE_CLIENT_OWN_CLOCK=0: none, CUPTI's
 * default CLOCK_REALTIME then), its buffer callbacks (4 KiB buffers: a
 * buffer of ours spans several of its), CONCURRENT_KERNEL and MEMCPY on; warmup launches and
 * a flush whose records it throws away (Kineto's clearActivities; as Kineto, it flushes only
 * while CUPTI holds one of its buffers); active launches, each
 * inside an external correlation id push/pop, and a copy; its kinds off and a forced flush,
 * whose records it keeps.  It prints what it got:
 *   client: subscribe=R kernels=N active=A memcpy=M callbacks=C in_clock=K active_correlations=S
 * where in_clock counts the kept records whose start lies in its clock between its trace's
 * start and end, and S is the sum of its active kernels' correlation ids. */
#define _GNU_SOURCE
#include <cupti.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern uint32_t fake_launch_kernel(const char *name, uint32_t stream, int driver_only);
extern uint32_t fake_memcpy_h2d(uint64_t bytes, uint32_t stream);

#define CLIENT_BUFFER 4096

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t CUPTIAPI own_clock(void) { return 2 * mono_ns() + 12345; }

/* FAKE_CLIENT_OWN_CLOCK=0: no timestamp callback, CUPTI's default clock (CLOCK_REALTIME). */
static int own_clock_wanted(void) {
    const char *v = getenv("FAKE_CLIENT_OWN_CLOCK");
    return !v || strcmp(v, "0") != 0;
}

static uint64_t client_clock(void) {
    if (own_clock_wanted()) return own_clock();
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int discarding;           /* warmup: its records are thrown away */
static uint64_t trace_start, trace_end; /* in its clock, per trace */
static int kernels, active, memcpys, callbacks, in_clock;
static uint64_t active_correlations; /* the sum of its active kernels' correlation ids */
static struct { uint64_t start; } pending_times[1 << 16];
static int n_pending;

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain,
                                 CUpti_CallbackId cbid, const void *data) {
    (void)userdata;
    const CUpti_CallbackData *cb = data;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API &&
        cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 && cb->callbackSite == CUPTI_API_ENTER)
        callbacks++;
}

/* Its buffers CUPTI holds: as Kineto, it flushes at all only when CUPTI holds one (with none
 * out, Kineto's activityBuffers() returns nothing without flushing). */
static int outstanding;

static void flush_if_outstanding(uint32_t flag) {
    if (outstanding > 0) cuptiActivityFlushAll(flag);
}

static void CUPTIAPI requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    outstanding++;
    *buffer = aligned_alloc(8, CLIENT_BUFFER);
    *size = CLIENT_BUFFER;
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
                               size_t valid) {
    (void)ctx;
    (void)stream;
    (void)size;
    outstanding--;
    CUpti_Activity *rec = NULL;
    while (!discarding && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
            kernels++;
            if (strcmp(k->name, "active_kernel") == 0) {
                active++;
                active_correlations += k->correlationId;
            }
            if (n_pending < (int)(sizeof pending_times / sizeof *pending_times))
                pending_times[n_pending++].start = k->start;
        } else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            memcpys++;
            if (n_pending < (int)(sizeof pending_times / sizeof *pending_times))
                pending_times[n_pending++].start = ((const CUpti_ActivityMemcpy6 *)rec)->start;
        }
    }
    free(buffer);
}

/* The records kept since the trace began: in its clock, within the trace? */
static void check_clock(void) {
    for (int i = 0; i < n_pending; i++)
        in_clock += pending_times[i].start >= trace_start && pending_times[i].start <= trace_end;
    n_pending = 0;
}

static void pause_ms(long ms) {
    struct timespec t = {0, ms * 1000000L};
    nanosleep(&t, NULL);
}

void fake_profiler_client_run(int launches, int cycles) {
    CUpti_SubscriberHandle subscriber;
    CUptiResult subscribe = cuptiSubscribe(&subscriber, on_callback, NULL);
    if (subscribe == CUPTI_SUCCESS)
        cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API,
                            CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000);
    if (own_clock_wanted()) cuptiActivityRegisterTimestampCallback(own_clock);
    cuptiActivityRegisterCallbacks(requested, completed);
    for (int cycle = 0; cycle < cycles; cycle++) {
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
        for (int i = 0; i < 5; i++) fake_launch_kernel("warmup_kernel", 7, 0);
        pause_ms(5); /* warmup steps take time: two readings of the clocks apart */
        discarding = 1;
        flush_if_outstanding(0);
        discarding = 0;
        trace_start = client_clock();
        for (int i = 0; i < launches; i++) {
            cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, (uint64_t)i);
            fake_launch_kernel("active_kernel", 7, 0);
            cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, NULL);
        }
        fake_memcpy_h2d(4096, 7);
        pause_ms(2);
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
        cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
        flush_if_outstanding(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
        trace_end = client_clock();
        check_clock();
        for (int i = 0; i < 3; i++) fake_launch_kernel("between_kernel", 7, 0);
    }
    printf("client: subscribe=%d kernels=%d active=%d memcpy=%d callbacks=%d in_clock=%d "
           "active_correlations=%llu\n",
           (int)subscribe, kernels, active, memcpys, callbacks, in_clock,
           (unsigned long long)active_correlations);
    fflush(stdout);
}
