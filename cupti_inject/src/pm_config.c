/* CUPTI PM sampling's config (pm_config.h): the metric list record asked for, made into
 * a config image for one device's chip by the profiler host.  PM sampling takes one pass:
 * the names a chip's tables refuse are left out, and while the list needs more than one pass
 * the last (least wanted) goes; each left out is named (PM_DEVICE "metric_missing"). */
#include "pm_config.h"
#include "pm_sampling.h"
#include "stream.h"

#ifdef PM_SAMPLING_HEADERS
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#define PM_DEFINE(name) __typeof__(&name) p_##name;
PM_ENTRIES(PM_DEFINE)
#undef PM_DEFINE

const char *pm_lookup_entries(void *cupti) {
    const char *missing = NULL;
#define PM_LOOKUP(name)                                                                       \
    if (!missing && !(p_##name = (__typeof__(p_##name))dlsym(cupti, #name)))                  \
        missing = "CUPTI lacks " #name " (PM sampling needs CUDA 12.6+)";
    PM_ENTRIES(PM_LOOKUP)
#undef PM_LOOKUP
    return missing;
}

void pm_emit_device(unsigned device, const char *chip, const char *status, const char *reason) {
    static struct xp_batch_PM_DEVICE row; /* under pm_sampling.c's pm_lock */
    row.rows = 1;
    row.device[0] = device;
    row.chip[0] = (struct xp_str){chip, (uint32_t)strlen(chip)};
    row.status[0] = (struct xp_str){status, (uint32_t)strlen(status)};
    row.reason[0] = (struct xp_str){reason, (uint32_t)strlen(reason)};
    xp_emit_PM_DEVICE(&row);
}

/* The refusal *why, and 0 (pm_configure's answer). */
static int refused(struct pm_refusal *why, const char *call, CUptiResult status) {
    why->call = call;
    why->status = status;
    return 0;
}

static CUptiResult host_open(struct pm_device *d, CUpti_Profiler_Host_Object **host) {
    PM_PARAMS(CUpti_Profiler_Host_Initialize_Params, p);
    p.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
    p.pChipName = d->chip;
    p.pCounterAvailabilityImage = d->availability;
    CUptiResult r = p_cuptiProfilerHostInitialize(&p);
    *host = r == CUPTI_SUCCESS ? p.pHostObject : NULL;
    return r;
}

void pm_host_close(CUpti_Profiler_Host_Object *host) {
    if (!host) return;
    PM_PARAMS(CUpti_Profiler_Host_Deinitialize_Params, p);
    p.pHostObject = host;
    p_cuptiProfilerHostDeinitialize(&p);
}

static CUptiResult add_metrics(CUpti_Profiler_Host_Object *host, const char **names, size_t n) {
    PM_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params, p);
    p.pHostObject = host;
    p.ppMetricNames = names;
    p.numMetrics = n;
    return p_cuptiProfilerHostConfigAddMetrics(&p);
}

/* d->names into a new host object and its config image; *passes: how many it needs (PM
 * sampling takes one).  All metrics in one call: added one call each, the same list needs
 * many passes (17 instead of 1 on GH100, CUPTI 13.0). */
static CUptiResult build_config(struct pm_device *d, size_t *passes, const char **call) {
    pm_host_close(d->host);
    d->host = NULL;
    free(d->config);
    d->config = NULL;
    CUptiResult r = host_open(d, &d->host);
    if (r != CUPTI_SUCCESS) { *call = "cuptiProfilerHostInitialize"; return r; }
    if ((r = add_metrics(d->host, d->names, d->n)) != CUPTI_SUCCESS) {
        *call = "cuptiProfilerHostConfigAddMetrics";
        return r;
    }
    PM_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params, sp);
    sp.pHostObject = d->host;
    if ((r = p_cuptiProfilerHostGetConfigImageSize(&sp)) != CUPTI_SUCCESS) {
        *call = "cuptiProfilerHostGetConfigImageSize";
        return r;
    }
    d->config_size = sp.configImageSize;
    d->config = calloc(1, d->config_size ? d->config_size : 1);
    if (!d->config) { *call = "malloc"; return CUPTI_ERROR_OUT_OF_MEMORY; }
    PM_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params, ip);
    ip.pHostObject = d->host;
    ip.configImageSize = d->config_size;
    ip.pConfigImage = d->config;
    if ((r = p_cuptiProfilerHostGetConfigImage(&ip)) != CUPTI_SUCCESS) {
        *call = "cuptiProfilerHostGetConfigImage";
        return r;
    }
    PM_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params, np);
    np.configImageSize = d->config_size;
    np.pConfigImage = d->config;
    if ((r = p_cuptiProfilerHostGetNumOfPasses(&np)) != CUPTI_SUCCESS) {
        *call = "cuptiProfilerHostGetNumOfPasses";
        return r;
    }
    *passes = np.numOfPasses;
    return CUPTI_SUCCESS;
}

/* The metrics of the list this chip has, in one pass: a name its tables refuse is left out,
 * and while the list needs more than one pass the last (least wanted) goes; each left out is
 * named (PM_DEVICE "metric_missing"). */
int pm_configure(unsigned device, struct pm_device *d, const char **metrics, size_t n_metrics,
                 struct pm_refusal *why) {
    /* All names at once first: each host object loads the chip's tables (slow), and a list
     * record made for this CUPTI is normally accepted whole. */
    CUpti_Profiler_Host_Object *whole = NULL;
    CUptiResult r = host_open(d, &whole);
    if (r != CUPTI_SUCCESS) return refused(why, "cuptiProfilerHostInitialize", r);
    r = add_metrics(whole, metrics, n_metrics);
    pm_host_close(whole);
    d->n = 0;
    for (size_t i = 0; r == CUPTI_SUCCESS && i < n_metrics; i++) {
        d->names[d->n] = metrics[i];
        d->index[d->n++] = (uint32_t)i;
    }
    for (size_t i = 0; r != CUPTI_SUCCESS && i < n_metrics; i++) {
        CUpti_Profiler_Host_Object *probe = NULL;
        CUptiResult opened = host_open(d, &probe);
        if (opened != CUPTI_SUCCESS)
            return refused(why, "cuptiProfilerHostInitialize", opened);
        CUptiResult added = add_metrics(probe, &metrics[i], 1);
        pm_host_close(probe);
        if (added == CUPTI_SUCCESS) {
            d->names[d->n] = metrics[i];
            d->index[d->n++] = (uint32_t)i;
        } else {
            pm_emit_device(device, d->chip, "metric_missing", metrics[i]);
        }
    }
    if (d->n == 0) return refused(why, "no metric of the list on this chip", CUPTI_SUCCESS);
    for (;;) {
        size_t passes = 0;
        const char *call = "";
        CUptiResult built = build_config(d, &passes, &call);
        if (built != CUPTI_SUCCESS) return refused(why, call, built);
        if (passes <= 1) return 1;
        if (d->n == 1) return refused(why, "one metric needs more than one pass", CUPTI_SUCCESS);
        d->n--;
        pm_emit_device(device, d->chip, "metric_missing", d->names[d->n]);
    }
}

#endif
