/* CUPTI PM sampling (issue 23): the GPU's performance counters sampled by the hardware at a
 * fixed GPU-time interval, inside the program, when `record` asks for them
 * (XPU_PERF_PM_METRICS: the metric names of collector/gpu_metrics/catalog.py's PM_COUNTERS,
 * XPU_PERF_PM_INTERVAL_NS, XPU_PERF_PM_BUFFER_MB).  For each device the program creates a
 * context on (the resource callback), our thread: makes the config image of the metrics for
 * the device's chip (profiler host, pm_config.c), enables, configures and starts PM sampling; then every
 * PM_DECODE_MS (200 ms) decodes the hardware buffer into a counter-data image, evaluates each completed
 * sample into PM_SAMPLE rows and initializes the image again (as NVIDIA's pm_sampling sample
 * does after every decode: on the H100, CUPTI 13, decoding into an image that already held
 * samples failed with CUPTI_ERROR_UNKNOWN at 1000 Hz, and where the image filled up its last
 * sample read over 100% and the next began with a fragment of a microsecond).  The final
 * flush stops sampling and decodes what is left; it leaves the sampler, the host object and
 * the images to the process's end (see pm_sampling_final).
 *
 * Written without a GPU to try it on, so defensive: every CUPTI status is checked; a device's
 * first failure ends its sampling, is logged to stderr once (the call and the status) and
 * written as its refusal (PM_DEVICE), which `record` turns into the fallback to NVML.  The
 * entry points are looked up in the loaded libcupti at run time: a CUPTI before 12.6 is a
 * refusal, not a library that fails to load.  Nothing here runs on the application's
 * threads but the context callback, which only notes the device (no lock: our thread may be
 * inside CUPTI waiting for a driver lock that application thread holds).  A forked child
 * never calls CUPTI (cupti_forked). */
#define _GNU_SOURCE
#include "pm_sampling.h"
#include "pm_config.h"
#include "state.h"
#include "stream.h"

#ifndef PM_SAMPLING_HEADERS
#include <stdlib.h>
/* Built against CUPTI headers from before PM sampling (12.6): every device is refused. */
static int asked;
int pm_sampling_on;
void pm_sampling_start(CUpti_SubscriberHandle subscriber) {
    asked = getenv("XPU_PERF_PM_METRICS") != NULL;
}
void pm_sampling_context_created(const void *resource_data) {}
void pm_sampling_final(void) {
    if (!asked || atomic_load(&cupti_forked)) return;
    static struct xp_batch_PM_DEVICE row;
    static const char reason[] = "built with CUPTI headers before 12.6 (no PM sampling)";
    row.rows = 1;
    row.chip[0] = (struct xp_str){"", 0};
    row.status[0] = (struct xp_str){"refused", 7};
    row.reason[0] = (struct xp_str){reason, sizeof reason - 1};
    xp_emit_PM_DEVICE(&row);
}
void pm_sampling_fork_child(void) {}
#else
#include <dlfcn.h>
#include <link.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PM_MAX_DEVICES 64
/* How often our thread decodes the hardware buffer.  A decode costs about the same whether
 * it holds one sample or ten (its fixed part dominates), so fewer decodes cost the program
 * less; but decodes too far apart lose samples in a GPU-saturating phase, where a decode
 * itself takes long (docs/benchmarks.md has the periods tried on the H200).
 * XPU_PERF_PM_DECODE_MS changes it. */
#define PM_DECODE_MS 200
#define PM_DECODE_FAILURES 10
#define PM_CLOCK_SLACK_NS (10ull * 1000000000ull)
/* libcuda's, to make the device's context current on our thread (absent: left as it is). */
static CUresult (*p_cuCtxSetCurrent)(CUcontext);

static struct pm_device devices[PM_MAX_DEVICES];
static char *metric_list;       /* XPU_PERF_PM_METRICS, split in place */
static const char *pm_metrics[PM_MAX_METRICS]; /* record's list, in its order */
static size_t pm_n_metrics;
static uint64_t interval_ns = 100000000ull;
static uint64_t decode_ms; /* PM_DECODE_MS, or XPU_PERF_PM_DECODE_MS */
static size_t buffer_bytes = 64u << 20;
static uint32_t max_samples;
static int debug;

static pthread_t thread;
static int thread_running;
static pthread_mutex_t pm_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pm_cond = PTHREAD_COND_INITIALIZER;
static int stop_requested;
static int final_flush;         /* pm_sampling_final has begun: no CUPTI teardown calls */
static int profiler_initialized;
static const char *unavailable; /* why no device can sample (the first missing entry point) */

/* How CUPTI's sample times map onto ours (CLOCK_MONOTONIC), decided at the first sample
 * (the headers do not say which clock they are on): already ours, CLOCK_REALTIME (the GPU's
 * global timer, which the driver keeps on the host's wall clock), cuptiGetTimestamp's clock,
 * or unknown (the offset estimated from the first sample's end and now: off by up to a
 * decode period).  Written as counter pm_sampling_clock. */
enum { PM_CLOCK_UNSET, PM_CLOCK_SAME, PM_CLOCK_REALTIME, PM_CLOCK_CUPTI, PM_CLOCK_ESTIMATED };
static int clock_mode;
static int64_t clock_offset;

static uint64_t n_samples, n_dropped, n_gaps, n_overflows, n_started, n_refused, n_values_failed;
static uint64_t n_short;        /* fragments and the last sample of a full image: left out */
/* What PM sampling costs the program, said in the summary: the wall time our thread spent
 * starting devices (once, while the program sets CUDA up) and then
 * decoding (busy_ns: CUPTI calls that may take driver locks the program's launches need),
 * its CPU time, and the time from the first device started to the final flush,
 * which the busy time is a share of. */
static uint64_t busy_ns, start_ns, thread_cpu_ns, first_start_ns;
/* Where the rounds' time goes (said with XPU_PERF_PM_DEBUG at the final flush):
 * cuptiPmSamplingDecodeData, evaluating samples, initialising the image again. */
static uint64_t decode_data_ns, evaluate_ns, image_ns, n_decode_calls;
static struct xp_batch_PM_SAMPLE batch;

static void log_debug(const char *fmt, unsigned device, const char *what) {
    if (debug) {
        fprintf(stderr, "xpu-perf: PM sampling GPU %u: ", device);
        fprintf(stderr, fmt, what);
        fputc('\n', stderr);
    }
}

static int has_library(struct dl_phdr_info *info, size_t size, void *name) {
    (void)size;
    return info->dlpi_name && strstr(info->dlpi_name, name) != NULL;
}

/* Debug: how far a device's start has come, and whether the profiler's host library (whose
 * static destructors the process's exit runs) is loaded yet. */
static void log_step(unsigned device, const char *step) {
    if (!debug) return;
    char what[128];
    snprintf(what, sizeof what, "%s at %.1f ms, nvperf_host %s", step, xp_now_ns() / 1e6,
             dl_iterate_phdr(has_library, "nvperf_host") ? "loaded" : "not loaded");
    log_debug("%s", device, what);
}

static void release(struct pm_device *d);

/* A device's first failure: logged once, written as its refusal, its sampling over (0). */
static int pm_refuse(unsigned device, struct pm_device *d, const char *call, CUptiResult r) {
    const char *status = NULL;
    if (r != CUPTI_SUCCESS) cuptiGetResultString(r, &status);
    char reason[256];
    /* The status's number too: `record` words the reason by it (collector/sources/
     * cupti_pm_sampling.py), whatever name this CUPTI gives it. */
    if (r == CUPTI_SUCCESS)
        snprintf(reason, sizeof reason, "%s", call);
    else
        snprintf(reason, sizeof reason, "%s: %s (%d)", call, status ? status : "?", (int)r);
    fprintf(stderr, "xpu-perf: PM sampling on GPU %u off: %s\n", device, reason);
    pm_emit_device(device, d->chip, d->state == PM_RUNNING ? "stopped" : "refused", reason);
    if (d->state != PM_RUNNING) n_refused++;
    release(d);
    d->state = PM_ENDED;
    return 0;
}

/* A device's sampling ended mid-run: stopped (once), disabled, its host object and images
 * freed, in the order of NVIDIA's sample (the H100 run that refused a device mid-run went on
 * and exited cleanly).  At the final flush nothing is torn down (pm_sampling_final). */
static void release(struct pm_device *d) {
    if (final_flush) return;
    if (d->sampler) {
        if (d->state == PM_RUNNING && !d->stopped) {
            PM_PARAMS(CUpti_PmSampling_Stop_Params, sp);
            sp.pPmSamplingObject = d->sampler;
            p_cuptiPmSamplingStop(&sp);
            d->stopped = 1;
            log_debug("%s", (unsigned)(d - devices), "stopped");
        }
        PM_PARAMS(CUpti_PmSampling_Disable_Params, dp);
        dp.pPmSamplingObject = d->sampler;
        p_cuptiPmSamplingDisable(&dp);
        d->sampler = NULL;
        log_debug("%s", (unsigned)(d - devices), "disabled");
    }
    pm_host_close(d->host);
    d->host = NULL;
    free(d->availability);
    free(d->config);
    free(d->data);
    d->availability = d->config = d->data = NULL;
}

/* ---- a device's sampling ---- */
static CUptiResult set_config(struct pm_device *d, CUpti_PmSampling_TriggerMode trigger,
                              CUpti_PmSampling_HardwareBuffer_AppendMode append) {
    PM_PARAMS(CUpti_PmSampling_SetConfig_Params, p);
    p.pPmSamplingObject = d->sampler;
    p.configSize = d->config_size;
    p.pConfig = d->config;
    p.hardwareBufferSize = buffer_bytes;
    /* GPU-time trigger (GA10x and later, Hopper included): the interval in ns.  The sysclk
     * trigger of Turing and GA100 counts clocks; their sys clock is near 1 GHz, so the same
     * number is about the same interval. */
    p.samplingInterval = interval_ns;
    p.triggerMode = trigger;
    /* Keep the latest (Ampere and later): an overflow loses the oldest samples and is
     * reported, sampling goes on; Turing keeps only the oldest. */
    p.hwBufferAppendMode = append;
    return p_cuptiPmSamplingSetConfig(&p);
}

static CUptiResult init_image(struct pm_device *d) {
    PM_PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params, p);
    p.pPmSamplingObject = d->sampler;
    p.counterDataSize = d->data_size;
    p.pCounterData = d->data;
    return p_cuptiPmSamplingCounterDataImageInitialize(&p);
}

static int start_device(unsigned device, struct pm_device *d) {
    CUcontext ctx = atomic_load(&d->context);
    if (p_cuCtxSetCurrent && ctx) p_cuCtxSetCurrent(ctx);
    CUptiResult r;
    log_step(device, "start");
    if (!profiler_initialized) {
        PM_PARAMS(CUpti_Profiler_Initialize_Params, ip);
        if ((r = p_cuptiProfilerInitialize(&ip)) != CUPTI_SUCCESS)
            return pm_refuse(device, d, "cuptiProfilerInitialize", r);
        profiler_initialized = 1;
    }
    PM_PARAMS(CUpti_Device_GetChipName_Params, cp);
    cp.deviceIndex = device;
    if ((r = p_cuptiDeviceGetChipName(&cp)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiDeviceGetChipName", r);
    snprintf(d->chip, sizeof d->chip, "%s", cp.pChipName ? cp.pChipName : "?");
    log_debug("chip %s", device, d->chip);

    PM_PARAMS(CUpti_PmSampling_GetCounterAvailability_Params, ap);
    ap.deviceIndex = device;
    if ((r = p_cuptiPmSamplingGetCounterAvailability(&ap)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiPmSamplingGetCounterAvailability", r);
    d->availability = calloc(1, ap.counterAvailabilityImageSize ? ap.counterAvailabilityImageSize : 1);
    if (!d->availability) return pm_refuse(device, d, "malloc", CUPTI_ERROR_OUT_OF_MEMORY);
    ap.pCounterAvailabilityImage = d->availability;
    if ((r = p_cuptiPmSamplingGetCounterAvailability(&ap)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiPmSamplingGetCounterAvailability", r);

    log_step(device, "availability");
    struct pm_refusal why;
    if (!pm_configure(device, d, pm_metrics, pm_n_metrics, &why))
        return pm_refuse(device, d, why.call, why.status);
    char what[96];
    snprintf(what, sizeof what, "%zu of %zu metrics in one pass, config image %zu bytes", d->n,
             pm_n_metrics, d->config_size);
    log_debug("%s", device, what);

    PM_PARAMS(CUpti_PmSampling_Enable_Params, ep);
    ep.deviceIndex = device;
    if ((r = p_cuptiPmSamplingEnable(&ep)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiPmSamplingEnable", r);
    d->sampler = ep.pPmSamplingObject;

    d->trigger = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
    r = set_config(d, d->trigger, CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST);
    if (r != CUPTI_SUCCESS) {
        log_debug("%s", device, "time trigger refused, trying the sysclk trigger");
        d->trigger = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_SYSCLK_INTERVAL;
        r = set_config(d, d->trigger, CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST);
    }
    if (r != CUPTI_SUCCESS) return pm_refuse(device, d, "cuptiPmSamplingSetConfig", r);

    PM_PARAMS(CUpti_PmSampling_GetCounterDataSize_Params, sp);
    sp.pPmSamplingObject = d->sampler;
    sp.pMetricNames = d->names;
    sp.numMetrics = d->n;
    sp.maxSamples = max_samples;
    if ((r = p_cuptiPmSamplingGetCounterDataSize(&sp)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiPmSamplingGetCounterDataSize", r);
    d->data_size = sp.counterDataSize;
    d->data = calloc(1, d->data_size ? d->data_size : 1);
    if (!d->data) return pm_refuse(device, d, "malloc", CUPTI_ERROR_OUT_OF_MEMORY);
    if ((r = init_image(d)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiPmSamplingCounterDataImageInitialize", r);

    PM_PARAMS(CUpti_PmSampling_Start_Params, stp);
    stp.pPmSamplingObject = d->sampler;
    if ((r = p_cuptiPmSamplingStart(&stp)) != CUPTI_SUCCESS)
        return pm_refuse(device, d, "cuptiPmSamplingStart", r);
    d->state = PM_RUNNING;
    d->stopped = 0;
    d->last_end = 0;
    n_started++;
    if (!first_start_ns) first_start_ns = xp_now_ns();
    pm_emit_device(device, d->chip, "started", "");
    snprintf(what, sizeof what, "started: interval %llu ns, buffer %zu bytes, image %zu bytes",
             (unsigned long long)interval_ns, buffer_bytes, d->data_size);
    log_debug("%s", device, what);
    return 1;
}

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t distance(uint64_t a, uint64_t b) { return a > b ? a - b : b - a; }

static void decide_clock(uint64_t end) {
    uint64_t mono = xp_now_ns(), real = realtime_ns(), cupti_now = 0;
    if (distance(end, mono) < PM_CLOCK_SLACK_NS) {
        clock_mode = PM_CLOCK_SAME;
        clock_offset = 0;
    } else if (distance(end, real) < PM_CLOCK_SLACK_NS) {
        clock_mode = PM_CLOCK_REALTIME;
        clock_offset = (int64_t)(mono - real);
    } else if (cuptiGetTimestamp(&cupti_now) == CUPTI_SUCCESS &&
               distance(end, cupti_now) < PM_CLOCK_SLACK_NS) {
        clock_mode = PM_CLOCK_CUPTI;
        clock_offset = (int64_t)(mono - cupti_now);
    } else {
        clock_mode = PM_CLOCK_ESTIMATED;
        clock_offset = (int64_t)(mono - end);
    }
}

static CUptiResult sample_times(struct pm_device *d, size_t i, uint64_t *start, uint64_t *end) {
    PM_PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params, p);
    p.pPmSamplingObject = d->sampler;
    p.pCounterDataImage = d->data;
    p.counterDataImageSize = d->data_size;
    p.sampleIndex = i;
    CUptiResult r = p_cuptiPmSamplingCounterDataGetSampleInfo(&p);
    *start = p.startTimestamp;
    *end = p.endTimestamp;
    return r;
}

/* The image's completed samples, as rows (the image holds only this decode's: it is
 * initialized again after each).  A sample much shorter than the interval (a fragment) and,
 * where the decode filled the image, its last sample are left out (n_short): on the H100 those
 * two read 155% to 1364% tensor active, where the image filled up. */
static int emit_samples(unsigned device, struct pm_device *d, int overflowed, int filled) {
    PM_PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params, ip);
    ip.pCounterDataImage = d->data;
    ip.counterDataImageSize = d->data_size;
    CUptiResult r = p_cuptiPmSamplingGetCounterDataInfo(&ip);
    if (r != CUPTI_SUCCESS) return pm_refuse(device, d, "cuptiPmSamplingGetCounterDataInfo", r);
    size_t completed = ip.numCompletedSamples;
    if (debug && completed) {
        char what[128];
        snprintf(what, sizeof what, "decoded %zu samples (%zu populated, image of %zu)%s",
                 completed, (size_t)ip.numPopulatedSamples, (size_t)ip.numTotalSamples,
                 filled ? ", image full" : "");
        log_debug("%s", device, what);
    }
    double values[PM_MAX_METRICS];
    uint64_t start, end;
    for (size_t i = 0; i < completed; i++) {
        if ((r = sample_times(d, i, &start, &end)) != CUPTI_SUCCESS)
            return pm_refuse(device, d, "cuptiPmSamplingCounterDataGetSampleInfo", r);
        if (end <= d->last_end || end < start) continue;
        if ((filled && i + 1 == completed) ||
            (d->trigger == CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL &&
             end - start < interval_ns / 4)) {
            n_short++;
            continue;
        }
        PM_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params, ep);
        ep.pHostObject = d->host;
        ep.pCounterDataImage = d->data;
        ep.counterDataImageSize = d->data_size;
        ep.rangeIndex = i;
        ep.ppMetricNames = d->names;
        ep.numMetrics = d->n;
        ep.pMetricValues = values;
        if ((r = p_cuptiProfilerHostEvaluateToGpuValues(&ep)) != CUPTI_SUCCESS) {
            n_values_failed++; /* one sample lost, not the device */
            d->last_end = end;
            continue;
        }
        if (clock_mode == PM_CLOCK_UNSET) {
            decide_clock(end);
            char what[160];
            snprintf(what, sizeof what, "first sample [%llu, %llu], clock %d, offset %lld ns",
                     (unsigned long long)start, (unsigned long long)end, clock_mode,
                     (long long)clock_offset);
            log_debug("%s", device, what);
        }
        /* Samples follow each other; a gap of whole intervals in a decode that reported an
         * overflow is samples the hardware buffer lost (keeping the latest, it drops the
         * oldest); any other gap is counted apart (a trigger that paused?). */
        if (d->last_end && start > d->last_end + interval_ns / 2) {
            uint64_t missing = (start - d->last_end + interval_ns / 2) / interval_ns;
            if (overflowed) n_dropped += missing; else n_gaps += missing;
        }
        d->last_end = end;
        n_samples++;
        for (size_t m = 0; m < d->n; m++) {
            if (batch.rows == XP_BATCH_ROWS) xp_emit_PM_SAMPLE(&batch);
            uint32_t row = batch.rows++;
            batch.device[row] = device;
            batch.start[row] = (uint64_t)((int64_t)start + clock_offset);
            batch.end[row] = (uint64_t)((int64_t)end + clock_offset);
            batch.metric[row] = d->index[m];
            batch.value[row] = values[m];
        }
    }
    return 1;
}

/* Everything the hardware buffer holds, into rows: decode into the fresh image, emit, make it
 * fresh again; once more while the image filled before the buffer's end. */
static void decode(unsigned device, struct pm_device *d, int final_round) {
    for (int round = 0; round < 64 && d->state == PM_RUNNING; round++) {
        PM_PARAMS(CUpti_PmSampling_DecodeData_Params, p);
        p.pPmSamplingObject = d->sampler;
        p.pCounterDataImage = d->data;
        p.counterDataImageSize = d->data_size;
        uint64_t t0 = xp_now_ns();
        CUptiResult r = p_cuptiPmSamplingDecodeData(&p);
        uint64_t t1 = xp_now_ns();
        decode_data_ns += t1 - t0;
        n_decode_calls++;
        if (r != CUPTI_SUCCESS) {
            /* Not documented whether an empty buffer is an error: PM_DECODE_FAILURES failed
             * decodes in a row end the device's sampling, fewer wait for the next round.  The image
             * is made fresh again in case the failed decode left something in it. */
            char what[96];
            snprintf(what, sizeof what, "cuptiPmSamplingDecodeData failed (%d)", (int)r);
            log_debug("%s", device, what);
            if (++d->decode_failures >= PM_DECODE_FAILURES || final_round)
                pm_refuse(device, d, "cuptiPmSamplingDecodeData", r);
            else if ((r = init_image(d)) != CUPTI_SUCCESS)
                pm_refuse(device, d, "cuptiPmSamplingCounterDataImageInitialize", r);
            break;
        }
        d->decode_failures = 0;
        if (p.overflow) n_overflows++;
        int filled = p.decodeStopReason == CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL;
        int emitted = emit_samples(device, d, p.overflow, filled);
        uint64_t t2 = xp_now_ns();
        evaluate_ns += t2 - t1;
        if (!emitted) break;
        r = init_image(d);
        image_ns += xp_now_ns() - t2;
        if (r != CUPTI_SUCCESS) {
            pm_refuse(device, d, "cuptiPmSamplingCounterDataImageInitialize", r);
            break;
        }
        if (!filled) break;
    }
    if (batch.rows) xp_emit_PM_SAMPLE(&batch);
}

/* One round of our thread (caller holds pm_lock): new devices started, running ones decoded. */
static void pm_round(void) {
    for (unsigned i = 0; i < PM_MAX_DEVICES; i++) {
        struct pm_device *d = &devices[i];
        if (d->state == PM_IDLE && atomic_load(&d->wanted)) {
            if (unavailable) {
                pm_emit_device(i, "", "refused", unavailable);
                fprintf(stderr, "xpu-perf: PM sampling on GPU %u off: %s\n", i, unavailable);
                n_refused++;
                d->state = PM_ENDED;
            } else {
                uint64_t t0 = xp_now_ns();
                start_device(i, d);
                start_ns += xp_now_ns() - t0;
            }
        }
        if (d->state == PM_RUNNING) {
            uint64_t t0 = xp_now_ns();
            decode(i, d, 0);
            busy_ns += xp_now_ns() - t0;
        }
    }
}

static void *pm_main(void *arg) {
    (void)arg;
    sigset_t all; /* the application's signals are not ours to take */
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    pthread_mutex_lock(&pm_lock);
    while (!stop_requested) {
        pm_round();
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(decode_ms / 1000);
        until.tv_nsec += (long)(decode_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
        while (!stop_requested && pthread_cond_timedwait(&pm_cond, &pm_lock, &until) != ETIMEDOUT) {}
    }
    struct timespec cpu;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu) == 0)
        thread_cpu_ns = (uint64_t)cpu.tv_sec * 1000000000ull + (uint64_t)cpu.tv_nsec;
    pthread_mutex_unlock(&pm_lock);
    return NULL;
}

/* ---- entry points (pm_sampling.h) ---- */
int pm_sampling_on;

static void resolve(void) {
    Dl_info info;
    void *cupti = NULL;
    if (dladdr((void *)cuptiGetResultString, &info) && info.dli_fname)
        cupti = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    if (!cupti) { unavailable = "libcupti not found again by its path"; return; }
    unavailable = pm_lookup_entries(cupti);
    void *cuda = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (cuda) p_cuCtxSetCurrent = (CUresult (*)(CUcontext))dlsym(cuda, "cuCtxSetCurrent");
}

/* Our thread ended (it finishes the start or decode it is in first): once, whoever asks
 * first, the main thread's exit or the final flush.  0: it did not end in time, or never ran. */
static int end_thread(void) {
    static int ended = -1;
    if (ended >= 0) return ended;
    if (!thread_running || atomic_load(&cupti_forked)) return ended = 0;
    struct timespec until; /* a device's start takes ~0.4 s on the H200; a hung one is left */
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 3;
    int locked = pthread_mutex_timedlock(&pm_lock, &until) == 0;
    stop_requested = 1;
    pthread_cond_signal(&pm_cond);
    if (locked) pthread_mutex_unlock(&pm_lock);
    ended = pthread_timedjoin_np(thread, NULL, &until) == 0;
    if (!ended)
        fprintf(stderr, "xpu-perf: PM sampling thread did not end; last samples not decoded\n");
    thread_running = 0;
    return ended;
}

/* exit() runs the exiting thread's thread_local destructors before any atexit handler.  The
 * profiler's host library registers static destructors (atexit) while our thread starts a
 * device, some at their first use: a program that ended during that start (a trivial one,
 * on the H200 with CUPTI 13: 4 runs of 4, still 2 of 8 with the library loaded early) had
 * them run under our thread, which died in an uncaught std::out_of_range or a SIGSEGV,
 * without the final flush.  Ended from the main thread's thread_local destructor, our thread
 * is out of CUPTI before any of them runs (a program that exits from another thread keeps
 * the race). */
extern int __cxa_thread_atexit_impl(void (*dtor)(void *), void *obj, void *dso)
    __attribute__((weak));
extern void *__dso_handle;

static void end_thread_at_exit(void *unused) {
    (void)unused;
    end_thread();
}

static void end_thread_when_main_exits(void) {
    static atomic_int registered;
    if (!__cxa_thread_atexit_impl || syscall(SYS_gettid) != getpid()) return;
    if (atomic_exchange(&registered, 1)) return;
    __cxa_thread_atexit_impl(end_thread_at_exit, NULL, &__dso_handle);
}

void pm_sampling_start(CUpti_SubscriberHandle subscriber) {
    const char *list = getenv("XPU_PERF_PM_METRICS");
    if (!list || !*list) return;
    debug = getenv("XPU_PERF_PM_DEBUG") != NULL;
    const char *v = getenv("XPU_PERF_PM_INTERVAL_NS");
    if (v && strtoull(v, NULL, 10) > 0) interval_ns = strtoull(v, NULL, 10);
    decode_ms = PM_DECODE_MS;
    v = getenv("XPU_PERF_PM_DECODE_MS");
    if (v && strtoull(v, NULL, 10) > 0) decode_ms = strtoull(v, NULL, 10);
    v = getenv("XPU_PERF_PM_BUFFER_MB");
    if (v && strtoull(v, NULL, 10) > 0) buffer_bytes = (size_t)strtoull(v, NULL, 10) << 20;
    /* Room for 2.5 decode periods of samples (a late round, the final one): the image is
     * made fresh after each decode and should never fill (where it does, the decode goes
     * on into a fresh one, and the full image's last sample is left out). */
    uint64_t room = (decode_ms * 1000000ull / interval_ns + 1) * 5 / 2 + 8;
    max_samples = (uint32_t)(room < 32 ? 32 : room > 8192 ? 8192 : room);
    metric_list = strdup(list);
    if (!metric_list) return;
    for (char *save = NULL, *name = strtok_r(metric_list, ",", &save);
         name && pm_n_metrics < PM_MAX_METRICS; name = strtok_r(NULL, ",", &save))
        pm_metrics[pm_n_metrics++] = name;
    static struct xp_batch_PM_METRIC names; /* once: before any sample */
    for (size_t i = 0; i < pm_n_metrics; i++) {
        names.metric[i] = (uint32_t)i;
        names.name[i] = (struct xp_str){pm_metrics[i], (uint32_t)strlen(pm_metrics[i])};
    }
    names.rows = (uint32_t)pm_n_metrics;
    xp_emit_PM_METRIC(&names);
    resolve();
    if (!subscriber) {
        unavailable = "no CUPTI subscriber (the program's own CUPTI client subscribed first)";
        devices[0].wanted = 1; /* said once, for the device a program uses first */
    } else {
        CUptiResult r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_RESOURCE,
                                            CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
        pm_sampling_on = r == CUPTI_SUCCESS;
        if (r != CUPTI_SUCCESS) {
            CHECK(r);
            unavailable = "cuptiEnableCallback(CONTEXT_CREATED) failed";
            devices[0].wanted = 1;
        }
    }
    if (pthread_create(&thread, NULL, pm_main, NULL) == 0) thread_running = 1;
    end_thread_when_main_exits();
}

void pm_sampling_context_created(const void *data) {
    const CUpti_ResourceData *rd = data;
    uint32_t device = 0;
    if (!pm_sampling_on) return; /* on for the program's own client only */
    if (!rd || cuptiGetDeviceId(rd->context, &device) != CUPTI_SUCCESS || device >= PM_MAX_DEVICES)
        return;
    struct pm_device *d = &devices[device];
    if (atomic_load(&d->wanted)) return;
    atomic_store(&d->context, rd->context);
    log_step(device, "context created");
    end_thread_when_main_exits();
    atomic_store(&d->wanted, 1);
    pthread_cond_signal(&pm_cond); /* without the lock: our thread may hold it inside CUPTI */
}

/* At the final flush (before the counters): our thread ends, sampling stops, the rest of
 * each hardware buffer is decoded.  Then nothing is torn down: on the H100 (CUPTI 13) the
 * Disable and host-object teardown here, inside the exit's final flush, ended the process in
 * glibc's "double free or corruption" before the flush was written (OpenXLA notes that
 * disabling the PM sampling object finalizes all of CUPTI, and other tools skip Disable at
 * teardown for a double free); the process is ending, and its end frees all of it. */
void pm_sampling_final(void) {
    if (atomic_load(&cupti_forked) || !end_thread()) return;
    pthread_mutex_lock(&pm_lock);
    final_flush = 1;
    uint64_t final_start = xp_now_ns();
    for (unsigned i = 0; i < PM_MAX_DEVICES; i++) {
        struct pm_device *d = &devices[i];
        if (d->state != PM_RUNNING) continue;
        PM_PARAMS(CUpti_PmSampling_Stop_Params, sp);
        sp.pPmSamplingObject = d->sampler;
        CUptiResult r = p_cuptiPmSamplingStop(&sp);
        d->stopped = 1;
        if (r != CUPTI_SUCCESS) CHECK(r);
        log_debug("%s", i, "stopped at the final flush");
        decode(i, d, 1);
        d->state = PM_ENDED;
        log_debug("%s", i, "final decode done; sampler and host object left to the exit");
    }
    uint64_t end = xp_now_ns();
    busy_ns += end - final_start; /* the final decode runs on the exiting thread, counted too */
    if (debug) {
        char what[224];
        snprintf(what, sizeof what,
                 "start %.1f ms, then busy %.1f ms: DecodeData %.1f ms in %llu calls, evaluate "
                 "%.1f ms for %llu samples, image init %.1f ms",
                 start_ns / 1e6, busy_ns / 1e6, decode_data_ns / 1e6,
                 (unsigned long long)n_decode_calls, evaluate_ns / 1e6,
                 (unsigned long long)n_samples, image_ns / 1e6);
        log_debug("%s", 0, what);
    }
    xp_emit_counter("pm_start_ns", start_ns);
    xp_emit_counter("pm_thread_busy_ns", busy_ns);
    xp_emit_counter("pm_thread_cpu_ns", thread_cpu_ns);
    xp_emit_counter("pm_sampling_span_ns", first_start_ns ? end - first_start_ns : 0);
    xp_emit_counter("pm_sampling_devices", n_started);
    xp_emit_counter("pm_sampling_refused", n_refused);
    xp_emit_counter("pm_samples", n_samples);
    xp_emit_counter("pm_samples_dropped", n_dropped);
    xp_emit_counter("pm_sample_gaps", n_gaps);
    xp_emit_counter("pm_buffer_overflows", n_overflows);
    xp_emit_counter("pm_samples_unevaluated", n_values_failed);
    xp_emit_counter("pm_samples_short", n_short);
    xp_emit_counter("pm_sampling_clock", (uint64_t)clock_mode);
    pthread_mutex_unlock(&pm_lock);
}

/* The child has none of our thread, and must not call CUPTI: its stream says nothing of PM
 * sampling (the parent's does). */
void pm_sampling_fork_child(void) {
    thread_running = 0;
    pthread_mutex_init(&pm_lock, NULL);
    pthread_cond_init(&pm_cond, NULL);
    for (unsigned i = 0; i < PM_MAX_DEVICES; i++) devices[i].state = PM_ENDED;
}
#endif
