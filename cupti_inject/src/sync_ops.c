/* Sync ops (SYNC rows): by default from the sync calls' own API callbacks (start/end of the
 * call, its context's device, the stream of a stream sync or wait), not from CUPTI's
 * SYNCHRONIZATION activity kind: that kind alone added ~20 points of overhead to the
 * launch-bound step on the H100 (docs/benchmarks.md) for the same facts.  With
 * XPU_PERF_SYNC_ACTIVITY=1 the rows come from those records instead (activity.c). */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "sync_ops.h"
#include "state.h"
#include "stream.h"

int sync_from_callbacks;
static struct xp_batch_SYNC *sync_batch;
static pthread_mutex_t *sync_batch_lock;

int sync_ops_init(pthread_mutex_t *batch_lock) {
    sync_batch_lock = batch_lock;
    sync_batch = calloc(1, sizeof *sync_batch);
    return sync_batch ? 0 : -1;
}

void push_sync(uint64_t start, uint64_t end, uint32_t correlation_id, uint32_t context,
               uint32_t device, uint32_t stream, uint32_t type, uint32_t event_id) {
    struct xp_batch_SYNC *b = sync_batch;
    uint32_t r = b->rows;
    b->start[r] = start;
    b->end[r] = end;
    b->correlation_id[r] = correlation_id;
    b->context[r] = context;
    b->stream[r] = stream;
    b->sync_type[r] = type;
    b->event_id[r] = event_id;
    b->device[r] = device;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_SYNC(b);
}

void add_api_sync(const CUpti_CallbackData *cb, uint8_t flags, uint64_t start, uint64_t end) {
    uint32_t context = NO_ID, device = NO_ID, stream = NO_ID;
    if (cb->context && cuptiGetContextId(cb->context, &context) != CUPTI_SUCCESS) context = NO_ID;
    /* The sync call's own context says which GPU it waits on (a process may drive several). */
    if (cb->context && cuptiGetDeviceId(cb->context, &device) != CUPTI_SUCCESS) device = NO_ID;
    if ((flags & (SYNC_STREAM | SYNC_WAIT)) && cb->functionParams) {
        /* cudaStreamSynchronize / cudaStreamWaitEvent / cuStream*: the stream is the first
         * parameter of each one's params struct. */
        CUstream handle = *(CUstream const *)cb->functionParams;
        uint8_t per_thread = cb->functionName && strstr(cb->functionName, "_ptsz") != NULL;
        if (!cb->context || cuptiGetStreamIdEx(cb->context, handle, per_thread, &stream) != CUPTI_SUCCESS)
            stream = NO_ID;
    }
    uint32_t type = flags & SYNC_CONTEXT ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE
                  : flags & SYNC_STREAM ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE
                  : flags & SYNC_EVENT  ? CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE
                                        : CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
    pthread_mutex_lock(sync_batch_lock);
    push_sync(start, end, cb->correlationId, context, device, stream, type, NO_ID);
    counters.records_sync++;
    pthread_mutex_unlock(sync_batch_lock);
}

void emit_sync_rows(void) { xp_emit_SYNC(sync_batch); }

void sync_ops_fork_child(void) { sync_batch->rows = 0; }
