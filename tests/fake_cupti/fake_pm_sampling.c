/* The fake CUPTI's PM sampling and profiler host (part of the fake libcupti.so.13): what
 * cupti_inject/src/pm_sampling.c calls, with values a test knows.
 *
 * A sample covers FAKE interval_ns of CLOCK_REALTIME (the clock of the GPU's global timer,
 * which the library must map onto its own); the samples of a started device come into being
 * as time passes and are decoded into the counter-data image on DecodeData.  A sample's
 * values are those of the phase the program set last before the sample's start
 * (fake_pm_phase: 0 idle, 1 tensor-bound, 2 DRAM-bound; the table below).
 * Knobs (environment):
 *   FAKE_PM=privileges   cuptiPmSamplingEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES
 *   FAKE_PM=busy         cuptiPmSamplingEnable: CUPTI_ERROR_HARDWARE_BUSY (another client)
 *   FAKE_PM=overflow     every third decode loses the 3 oldest samples it holds (the
 *                        hardware buffer kept the latest), reporting overflow; the count of
 *                        lost samples is fake_pm_lost()
 *   FAKE_PM=long_first   the first sample lasts FAKE_PM_FIRST_MS (default 900) ms whatever
 *                        the interval, as the H200 (CUPTI 13) showed at 10 and 100 Hz: one
 *                        0.72-0.95 s sample over the program's first GPU phase; its values
 *                        are the phase's at its start
 *   FAKE_PM_NO_NVLINK=1  the chip has no NVLink metrics (ConfigAddMetrics refuses them)
 *   FAKE_PM=exit_race    as the H200 (CUPTI 13) showed: the profiler's host library registers
 *                        static destructors (atexit) at its first use, inside the host object's
 *                        Initialize, and the start goes on for FAKE_PM_START_MS (default 300)
 *                        ms; the configuration calls that follow abort ("std::out_of_range")
 *                        once the process's exit has run those destructors
 *                        (fake_pm_host_starting() says the start is under way)
 * The config image takes at most 16 metrics in one pass; more need two.
 * What the H100 (CUPTI 13) showed, modelled: DecodeData into an image that already holds
 * samples (not initialized again since a decode) fails with CUPTI_ERROR_UNKNOWN; Disable or
 * the host object's Deinitialize after the final flush's forced cuptiActivityFlushAll (at the
 * process's exit) aborts as glibc did ("double free or corruption"); so does a second
 * Disable of one object. */
#define _GNU_SOURCE
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define FAKE_PHASES 3
#define FAKE_MAX_METRICS 32
#define FAKE_MAX_PHASE_CHANGES 256
#define MIB (1024.0 * 1024.0)

void fake_fork_check(const char *call); /* fake_cupti.c */
int fake_final_flush_seen;             /* fake_cupti.c: a forced cuptiActivityFlushAll came */

static void exit_teardown_check(const char *call) {
    if (!fake_final_flush_seen) return;
    fprintf(stderr, "fake CUPTI: %s in the final flush: double free or corruption (out)\n", call);
    abort();
}

/* The chip's metrics and each phase's value (idle, tensor-bound, DRAM-bound). */
static const struct {
    const char *name;
    double value[FAKE_PHASES];
} table[] = {
    {"sm__cycles_active.avg.pct_of_peak_sustained_elapsed", {0, 90, 60}},
    {"sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed", {0, 80, 0}},
    {"dram__throughput.avg.pct_of_peak_sustained_elapsed", {0, 10, 85}},
    {"dram__bytes_read.sum.per_second", {0, 100 * MIB, 2000 * MIB}},
    {"dram__bytes_write.sum.per_second", {0, 50 * MIB, 1000 * MIB}},
    {"smsp__issue_active.avg.pct_of_peak_sustained_elapsed", {0, 45, 20}},
    {"sm__warps_active.avg.pct_of_peak_sustained_elapsed", {0, 30, 70}},
    {"gr__cycles_active.avg.pct_of_peak_sustained_elapsed", {0, 100, 100}},
    {"pcie__read_bytes.sum.per_second", {8 * MIB, 8 * MIB, 8 * MIB}},
    {"pcie__write_bytes.sum.per_second", {4 * MIB, 4 * MIB, 4 * MIB}},
    {"nvlrx__bytes.sum.per_second", {0, 0, 0}},
    {"nvltx__bytes.sum.per_second", {0, 0, 0}},
    {"gpc__cycles_elapsed.avg.per_second", {1755e6, 1755e6, 1755e6}},
};
#define TABLE_SIZE (sizeof table / sizeof *table)

static int metric_of(const char *name) {
    const char *no_nvlink = getenv("FAKE_PM_NO_NVLINK");
    if (no_nvlink && *no_nvlink == '1' && strncmp(name, "nvl", 3) == 0) return -1;
    for (size_t i = 0; i < TABLE_SIZE; i++)
        if (strcmp(table[i].name, name) == 0) return (int)i;
    return -1;
}

static int scenario(const char *name) {
    const char *v = getenv("FAKE_PM");
    return v && strcmp(v, name) == 0;
}

static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- phases ---- */
static pthread_mutex_t phase_lock = PTHREAD_MUTEX_INITIALIZER;
static struct { uint64_t at; int phase; } changes[FAKE_MAX_PHASE_CHANGES];
static size_t n_changes;
static uint64_t lost;

EXPORT void fake_pm_phase(int phase) {
    pthread_mutex_lock(&phase_lock);
    if (n_changes < FAKE_MAX_PHASE_CHANGES && phase >= 0 && phase < FAKE_PHASES)
        changes[n_changes++] = (typeof(changes[0])){realtime_ns(), phase};
    pthread_mutex_unlock(&phase_lock);
}

EXPORT uint64_t fake_pm_lost(void) { return lost; }

static int phase_at(uint64_t t) {
    int phase = 0;
    pthread_mutex_lock(&phase_lock);
    for (size_t i = 0; i < n_changes && changes[i].at <= t; i++) phase = changes[i].phase;
    pthread_mutex_unlock(&phase_lock);
    return phase;
}

/* ---- the host library's static destructors (FAKE_PM=exit_race) ---- */
static atomic_int host_starting, host_statics_gone;

static void host_statics_destroyed(void) { atomic_store(&host_statics_gone, 1); }

EXPORT int fake_pm_host_starting(void) { return atomic_load(&host_starting); }

static void host_in_use(const char *call) {
    if (!atomic_load(&host_statics_gone)) return;
    fprintf(stderr, "fake nvperf: %s after its static destructors ran: terminate called after "
                    "throwing an instance of 'std::out_of_range'\n", call);
    abort();
}

/* ---- profiler host ---- */
struct CUpti_Profiler_Host_Object {
    uint32_t n;
    uint32_t metric[FAKE_MAX_METRICS];
};

EXPORT CUptiResult cuptiProfilerInitialize(CUpti_Profiler_Initialize_Params *p) {
    fake_fork_check(__func__);
    return p && p->structSize ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
}

EXPORT CUptiResult cuptiDeviceGetChipName(CUpti_Device_GetChipName_Params *p) {
    fake_fork_check(__func__);
    if (!p || p->deviceIndex > 1) return CUPTI_ERROR_INVALID_DEVICE;
    p->pChipName = "GH100";
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingGetCounterAvailability(CUpti_PmSampling_GetCounterAvailability_Params *p) {
    fake_fork_check(__func__);
    if (!p->pCounterAvailabilityImage) {
        p->counterAvailabilityImageSize = 16;
        return CUPTI_SUCCESS;
    }
    memset(p->pCounterAvailabilityImage, 0xa5, p->counterAvailabilityImageSize);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *p) {
    if (p->profilerType != CUPTI_PROFILER_TYPE_PM_SAMPLING || !p->pChipName ||
        strcmp(p->pChipName, "GH100") != 0)
        return CUPTI_ERROR_INVALID_PARAMETER;
    if (scenario("exit_race") && !atomic_exchange(&host_starting, 1)) {
        atexit(host_statics_destroyed);
        const char *ms = getenv("FAKE_PM_START_MS");
        long wait_ms = ms && *ms ? atol(ms) : 300;
        struct timespec t = {wait_ms / 1000, (wait_ms % 1000) * 1000000L};
        while (nanosleep(&t, &t) != 0) {}
    }
    p->pHostObject = calloc(1, sizeof *p->pHostObject);
    return p->pHostObject ? CUPTI_SUCCESS : CUPTI_ERROR_OUT_OF_MEMORY;
}

EXPORT CUptiResult cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *p) {
    exit_teardown_check(__func__);
    free(p->pHostObject);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *p) {
    host_in_use(__func__);
    struct CUpti_Profiler_Host_Object *h = p->pHostObject;
    for (size_t i = 0; i < p->numMetrics; i++)
        if (metric_of(p->ppMetricNames[i]) < 0) return CUPTI_ERROR_INVALID_METRIC_NAME;
    for (size_t i = 0; i < p->numMetrics && h->n < FAKE_MAX_METRICS; i++)
        h->metric[h->n++] = (uint32_t)metric_of(p->ppMetricNames[i]);
    return CUPTI_SUCCESS;
}

/* The config image: the count, then the metric ids. */
EXPORT CUptiResult cuptiProfilerHostGetConfigImageSize(CUpti_Profiler_Host_GetConfigImageSize_Params *p) {
    host_in_use(__func__);
    p->configImageSize = 4u * (1 + p->pHostObject->n);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *p) {
    const struct CUpti_Profiler_Host_Object *h = p->pHostObject;
    if (p->configImageSize < 4u * (1 + h->n)) return CUPTI_ERROR_INVALID_PARAMETER;
    memcpy(p->pConfigImage, &h->n, 4);
    memcpy(p->pConfigImage + 4, h->metric, 4u * h->n);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *p) {
    uint32_t n = 0;
    if (p->configImageSize < 4) return CUPTI_ERROR_INVALID_PARAMETER;
    memcpy(&n, p->pConfigImage, 4);
    p->numOfPasses = n <= 16 ? 1 : 2;
    return CUPTI_SUCCESS;
}

/* ---- PM sampling ---- */
struct CUpti_PmSampling_Object {
    size_t device;
    uint64_t interval, next_start; /* the next sample's start (0: not started) */
    uint64_t stopped_at;           /* 0: running */
    uint32_t decodes;
    uint64_t made; /* samples decoded so far */
};

/* The counter-data image: a header, then per sample its times and phase. */
struct image_header { uint32_t magic, max, count, unused; };
struct image_sample { uint64_t start, end; uint32_t phase, unused; };
#define IMAGE_MAGIC 0x46504d53u

static struct CUpti_PmSampling_Object *enabled[2];

EXPORT CUptiResult cuptiPmSamplingEnable(CUpti_PmSampling_Enable_Params *p) {
    fake_fork_check(__func__);
    if (scenario("privileges")) return CUPTI_ERROR_INSUFFICIENT_PRIVILEGES;
    if (scenario("busy")) return CUPTI_ERROR_HARDWARE_BUSY;
    if (p->deviceIndex > 1) return CUPTI_ERROR_INVALID_DEVICE;
    if (enabled[p->deviceIndex]) return CUPTI_ERROR_HARDWARE_BUSY;
    struct CUpti_PmSampling_Object *o = calloc(1, sizeof *o);
    if (!o) return CUPTI_ERROR_OUT_OF_MEMORY;
    o->device = p->deviceIndex;
    enabled[p->deviceIndex] = o;
    p->pPmSamplingObject = o;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingDisable(CUpti_PmSampling_Disable_Params *p) {
    fake_fork_check(__func__);
    struct CUpti_PmSampling_Object *o = p->pPmSamplingObject;
    if (!o) return CUPTI_ERROR_INVALID_PARAMETER;
    exit_teardown_check(__func__);
    if (enabled[0] != o && enabled[1] != o) {
        fprintf(stderr, "fake CUPTI: cuptiPmSamplingDisable of a disabled object: double free\n");
        abort();
    }
    enabled[o->device] = NULL;
    free(o);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingSetConfig(CUpti_PmSampling_SetConfig_Params *p) {
    fake_fork_check(__func__);
    uint32_t n = 0;
    if (!p->pPmSamplingObject || p->configSize < 4 || p->samplingInterval == 0 ||
        p->triggerMode != CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL)
        return CUPTI_ERROR_INVALID_PARAMETER;
    memcpy(&n, p->pConfig, 4);
    if (n > 16) return CUPTI_ERROR_INVALID_PARAMETER; /* more than one pass */
    p->pPmSamplingObject->interval = p->samplingInterval;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingStart(CUpti_PmSampling_Start_Params *p) {
    fake_fork_check(__func__);
    struct CUpti_PmSampling_Object *o = p->pPmSamplingObject;
    if (!o || !o->interval) return CUPTI_ERROR_INVALID_OPERATION;
    o->next_start = realtime_ns();
    o->stopped_at = 0;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingStop(CUpti_PmSampling_Stop_Params *p) {
    fake_fork_check(__func__);
    struct CUpti_PmSampling_Object *o = p->pPmSamplingObject;
    if (!o || !o->next_start) return CUPTI_ERROR_INVALID_OPERATION;
    o->stopped_at = realtime_ns();
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingGetCounterDataSize(CUpti_PmSampling_GetCounterDataSize_Params *p) {
    fake_fork_check(__func__);
    if (!p->maxSamples) return CUPTI_ERROR_INVALID_PARAMETER;
    p->counterDataSize = sizeof(struct image_header) + p->maxSamples * sizeof(struct image_sample);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingCounterDataImageInitialize(CUpti_PmSampling_CounterDataImage_Initialize_Params *p) {
    fake_fork_check(__func__);
    if (p->counterDataSize < sizeof(struct image_header)) return CUPTI_ERROR_INVALID_PARAMETER;
    struct image_header h = {IMAGE_MAGIC, 0, 0, 0};
    h.max = (uint32_t)((p->counterDataSize - sizeof h) / sizeof(struct image_sample));
    memcpy(p->pCounterData, &h, sizeof h);
    return CUPTI_SUCCESS;
}

static struct image_header *header(const uint8_t *image) {
    struct image_header *h = (struct image_header *)image;
    return h && h->magic == IMAGE_MAGIC ? h : NULL;
}

static struct image_sample *samples(const uint8_t *image) {
    return (struct image_sample *)(image + sizeof(struct image_header));
}

/* The samples that have ended since the last decode, into a fresh image until it is full. */
EXPORT CUptiResult cuptiPmSamplingDecodeData(CUpti_PmSampling_DecodeData_Params *p) {
    fake_fork_check(__func__);
    struct CUpti_PmSampling_Object *o = p->pPmSamplingObject;
    struct image_header *h = header(p->pCounterDataImage);
    if (!o || !h || !o->next_start) return CUPTI_ERROR_INVALID_OPERATION;
    if (h->count) return CUPTI_ERROR_UNKNOWN; /* not initialized again since a decode */
    uint64_t until = o->stopped_at ? o->stopped_at : realtime_ns();
    p->overflow = 0;
    /* Every third decode with more than three samples waiting: the oldest three were
     * overwritten in the hardware buffer. */
    if (scenario("overflow") && ++o->decodes % 3 == 0 && o->next_start + 4 * o->interval <= until) {
        o->next_start += 3 * o->interval;
        lost += 3;
        p->overflow = 1;
    }
    uint64_t first = o->interval;
    if (scenario("long_first") && o->made == 0) {
        const char *ms = getenv("FAKE_PM_FIRST_MS");
        first = (ms ? strtoull(ms, NULL, 10) : 900) * 1000000ull;
    }
    while (o->next_start + (o->made ? o->interval : first) <= until && h->count < h->max) {
        struct image_sample *s = &samples(p->pCounterDataImage)[h->count++];
        s->start = o->next_start;
        s->end = o->next_start + (o->made++ ? o->interval : first);
        s->phase = (uint32_t)phase_at(s->start);
        o->next_start = s->end;
    }
    p->decodeStopReason = o->next_start + o->interval <= until
                              ? CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL
                              : CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingGetCounterDataInfo(CUpti_PmSampling_GetCounterDataInfo_Params *p) {
    fake_fork_check(__func__);
    const struct image_header *h = header(p->pCounterDataImage);
    if (!h) return CUPTI_ERROR_INVALID_PARAMETER;
    p->numTotalSamples = h->max;
    p->numPopulatedSamples = h->count;
    p->numCompletedSamples = h->count;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiPmSamplingCounterDataGetSampleInfo(CUpti_PmSampling_CounterData_GetSampleInfo_Params *p) {
    fake_fork_check(__func__);
    const struct image_header *h = header(p->pCounterDataImage);
    if (!h || p->sampleIndex >= h->count) return CUPTI_ERROR_INVALID_PARAMETER;
    const struct image_sample *s = &samples(p->pCounterDataImage)[p->sampleIndex];
    p->startTimestamp = s->start;
    p->endTimestamp = s->end;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiProfilerHostEvaluateToGpuValues(CUpti_Profiler_Host_EvaluateToGpuValues_Params *p) {
    const struct image_header *h = header(p->pCounterDataImage);
    if (!h || p->rangeIndex >= h->count) return CUPTI_ERROR_INVALID_PARAMETER;
    uint32_t phase = samples(p->pCounterDataImage)[p->rangeIndex].phase;
    for (size_t i = 0; i < p->numMetrics; i++) {
        int m = metric_of(p->ppMetricNames[i]);
        if (m < 0) return CUPTI_ERROR_INVALID_METRIC_NAME;
        p->pMetricValues[i] = table[m].value[phase];
    }
    return CUPTI_SUCCESS;
}
