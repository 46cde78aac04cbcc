/* CUPTI activity (activity.c): buffers requested and completed, records parsed into batches. */
#ifndef XP_ACTIVITY_H
#define XP_ACTIVITY_H

#include <pthread.h>

extern pthread_mutex_t activity_lock;
int activity_init(void);
/* Buffer callbacks and attributes (before any kind is enabled). */
void activity_register(void);
/* The enabled kinds per XPU_PERF_KINDS (windows.c's enable_kind). */
void activity_enable_kinds(void);
void activity_fork_child(void);

#endif
