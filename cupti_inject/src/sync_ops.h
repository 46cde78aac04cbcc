/* Sync ops (sync_ops.c): SYNC rows from the sync calls' callbacks or CUPTI's records. */
#ifndef XP_SYNC_OPS_H
#define XP_SYNC_OPS_H

#include <cupti.h>
#include <pthread.h>
#include <stdint.h>

/* What kind of sync call a traced API is (api_callbacks.c's flags of an API: these bits). */
enum { SYNC_CONTEXT = 4, SYNC_STREAM = 8, SYNC_EVENT = 16, SYNC_WAIT = 32 };
#define SYNC_ANY (SYNC_CONTEXT | SYNC_STREAM | SYNC_EVENT | SYNC_WAIT)

/* Sync ops from the API callbacks (not XPU_PERF_SYNC_ACTIVITY, callbacks on): set by
 * activity.c with the kinds, read by api_callbacks.c. */
extern int sync_from_callbacks;
/* batch_lock: the lock that guards the SYNC batch (activity.c's, which guards every batch
 * that a completed buffer fills). */
int sync_ops_init(pthread_mutex_t *batch_lock);
/* One SYNC row (caller holds batch_lock). */
void push_sync(uint64_t start, uint64_t end, uint32_t correlation_id, uint32_t context,
               uint32_t device, uint32_t stream, uint32_t type, uint32_t event_id);
/* The sync op of a finished sync call, from its callback. */
void add_api_sync(const CUpti_CallbackData *cb, uint8_t flags, uint64_t start, uint64_t end);
void emit_sync_rows(void);
void sync_ops_fork_child(void);

#endif
