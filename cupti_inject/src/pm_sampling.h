/* CUPTI PM sampling (pm_sampling.c): GPU counters per device, decoded on a thread of ours. */
#ifndef XP_PM_SAMPLING_H
#define XP_PM_SAMPLING_H

#include <cupti.h>

/* PM sampling when record asked for it (XPU_PERF_PM_METRICS): the metric names written, the
 * context-created callback on for our subscriber (NULL: none, the refusal said), our thread
 * started. */
void pm_sampling_start(CUpti_SubscriberHandle subscriber);
/* Set by pm_sampling_start when it turned the context-created callback on (the program's
 * own CUPTI client turning it off must leave ours on: program_profiler.c). */
extern int pm_sampling_on;
/* CUPTI_CBID_RESOURCE_CONTEXT_CREATED: sampling of the context's device wanted. */
void pm_sampling_context_created(const void *resource_data);
/* At the final flush: sampling stopped, the rest decoded, its counters written. */
void pm_sampling_final(void);
void pm_sampling_fork_child(void);

#endif
