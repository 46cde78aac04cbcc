/* Internal to CUPTI PM sampling (pm_sampling.c: the devices, our thread, the samples;
 * pm_config.c: the metric list made into a one-pass config image for a device's chip).  Only
 * with CUPTI headers that have PM sampling (12.6+): PM_SAMPLING_HEADERS. */
#ifndef XP_PM_CONFIG_H
#define XP_PM_CONFIG_H

#include <cupti.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#if __has_include(<cupti_pmsampling.h>) && __has_include(<cupti_profiler_host.h>)
#define PM_SAMPLING_HEADERS 1
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#define PM_MAX_METRICS 64
/* A CUPTI parameter struct, zeroed but for its size (pPriv NULL, as the headers ask). */
#define PM_PARAMS(type, var) type var = {.structSize = type##_STRUCT_SIZE}

/* The entry points, typed as NVIDIA's headers declare them. */
#define PM_ENTRIES(X)                                                                        \
    X(cuptiProfilerInitialize) X(cuptiDeviceGetChipName)                                     \
    X(cuptiPmSamplingGetCounterAvailability) X(cuptiProfilerHostInitialize)                  \
    X(cuptiProfilerHostDeinitialize) X(cuptiProfilerHostConfigAddMetrics)                    \
    X(cuptiProfilerHostGetConfigImageSize) X(cuptiProfilerHostGetConfigImage)                \
    X(cuptiProfilerHostGetNumOfPasses) X(cuptiProfilerHostEvaluateToGpuValues)               \
    X(cuptiPmSamplingEnable) X(cuptiPmSamplingDisable) X(cuptiPmSamplingSetConfig)           \
    X(cuptiPmSamplingStart) X(cuptiPmSamplingStop) X(cuptiPmSamplingDecodeData)              \
    X(cuptiPmSamplingGetCounterDataSize) X(cuptiPmSamplingCounterDataImageInitialize)        \
    X(cuptiPmSamplingGetCounterDataInfo) X(cuptiPmSamplingCounterDataGetSampleInfo)
/* Looked up in the loaded libcupti (pm_lookup_entries, from pm_sampling.c's resolve). */
#define PM_DECLARE(name) extern __typeof__(&name) p_##name;
PM_ENTRIES(PM_DECLARE)
#undef PM_DECLARE
/* Every entry point from the libcupti dlopen()ed as `cupti`; NULL, or why PM sampling cannot
 * run (the first one missing). */
const char *pm_lookup_entries(void *cupti);

enum pm_state { PM_IDLE, PM_RUNNING, PM_ENDED };

struct pm_device {
    _Atomic int wanted;         /* a context was created on it (the callback) */
    _Atomic(CUcontext) context;
    int state;                  /* enum pm_state, our thread's (then the final flush's) */
    char chip[64];
    CUpti_Profiler_Host_Object *host;
    CUpti_PmSampling_Object *sampler;
    uint8_t *availability, *config, *data;
    size_t config_size, data_size;
    const char *names[PM_MAX_METRICS]; /* the metrics this device's config holds */
    uint32_t index[PM_MAX_METRICS];    /* their index in XPU_PERF_PM_METRICS */
    size_t n;
    int trigger;                /* CUpti_PmSampling_TriggerMode SetConfig took */
    int stopped;                /* cuptiPmSamplingStop called (it is called once) */
    uint64_t last_end;          /* CUPTI's end time of the last emitted sample (0: none) */
    int decode_failures;        /* in a row */
};

/* A PM_DEVICE row: "started", "refused", "stopped" or "metric_missing" and why. */
void pm_emit_device(unsigned device, const char *chip, const char *status, const char *reason);
/* Why a device cannot sample: the call that failed and its status (CUPTI_SUCCESS: the call
 * is the reason itself). */
struct pm_refusal {
    const char *call;
    CUptiResult status;
};
/* d->names/index/n, d->host and d->config for the device's chip: the metrics of `metrics`
 * (record's list, in its order) its tables accept, in one pass (1; 0: refused, *why says
 * why, for the caller's refusal). */
int pm_configure(unsigned device, struct pm_device *d, const char **metrics, size_t n_metrics,
                 struct pm_refusal *why);
void pm_host_close(CUpti_Profiler_Host_Object *host);
#endif

#endif
