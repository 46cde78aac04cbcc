/* CUPTI activity: the buffers CUPTI fills (buffer_requested hands out one, buffer_completed
 * gets it back full), each record parsed into one row of its kind's batch (KERNEL, MEMCPY,
 * MEMSET, SYNC via sync_ops.c, MARKER, MEMORY, DEVICE) and the batches emitted into the stream
 * once per buffer; the program's own CUPTI client gets its copy first (program_records.c).
 * CUPTI calls buffer_completed on its own thread or at cuptiActivityFlushAll
 * (the flush hook, a window's close), never on the application's launch path. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "activity.h"
#include "config.h"
#include "experiments.h"
#include "kinds.h"
#include "program_records.h"
#include "state.h"
#include "stream.h"
#include "strings.h"
#include "sync_ops.h"
#include "windows.h"

#define ACTIVITY_BUFFER_SIZE (8u << 20)

pthread_mutex_t activity_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xp_batch_KERNEL *kernel_batch;
static struct xp_batch_MEMCPY *memcpy_batch;
static struct xp_batch_MEMSET *memset_batch;
static struct xp_batch_MARKER *marker_batch;
static struct xp_batch_DEVICE *device_batch;
static struct xp_batch_MEMORY *memory_batch;

int activity_init(void) {
    kernel_batch = calloc(1, sizeof *kernel_batch);
    memcpy_batch = calloc(1, sizeof *memcpy_batch);
    memset_batch = calloc(1, sizeof *memset_batch);
    int sync = sync_ops_init(&activity_lock);
    marker_batch = calloc(1, sizeof *marker_batch);
    device_batch = calloc(1, sizeof *device_batch);
    memory_batch = calloc(1, sizeof *memory_batch);
    if (!kernel_batch || !memcpy_batch || !memset_batch || sync != 0 || !marker_batch || !device_batch ||
        !memory_batch)
        return -1;
    return 0;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records) {
    *buffer = aligned_alloc(8, ACTIVITY_BUFFER_SIZE);
    *size = *buffer ? ACTIVITY_BUFFER_SIZE : 0;
    *max_records = 0;
}

static void add_kernel(const CUpti_ActivityKernel10 *k) {
    struct xp_batch_KERNEL *b = kernel_batch;
    uint32_t r = b->rows;
    b->start[r] = k->start;
    b->end[r] = k->end;
    b->correlation_id[r] = k->correlationId;
    b->device[r] = k->deviceId;
    b->context[r] = k->contextId;
    b->stream[r] = k->streamId;
    b->grid_x[r] = k->gridX;
    b->grid_y[r] = k->gridY;
    b->grid_z[r] = k->gridZ;
    b->block_x[r] = k->blockX;
    b->block_y[r] = k->blockY;
    b->block_z[r] = k->blockZ;
    b->registers[r] = k->registersPerThread;
    b->static_shared_memory[r] = k->staticSharedMemory;
    b->dynamic_shared_memory[r] = k->dynamicSharedMemory;
    b->graph_id[r] = k->graphId;
    b->graph_node_id[r] = k->graphNodeId;
    b->name_id[r] = xp_intern(k->name);
    if (++b->rows == XP_BATCH_ROWS) xp_emit_KERNEL(b);
}

/* One MEMCPY row from either copy record (CUpti_ActivityMemcpy6 and MemcpyPtoP4 name these
 * fields alike); only a peer-to-peer copy has devices of its own at each end. */
#define PUSH_MEMCPY(m, src_dev, dst_dev)                                                     \
    do {                                                                                     \
        struct xp_batch_MEMCPY *b = memcpy_batch;                                            \
        uint32_t r = b->rows;                                                                \
        b->start[r] = (m)->start;                                                            \
        b->end[r] = (m)->end;                                                                \
        b->correlation_id[r] = (m)->correlationId;                                           \
        b->device[r] = (m)->deviceId;                                                        \
        b->stream[r] = (m)->streamId;                                                        \
        b->copy_kind[r] = (m)->copyKind;                                                     \
        b->src_kind[r] = (m)->srcKind;                                                       \
        b->dst_kind[r] = (m)->dstKind;                                                       \
        b->bytes[r] = (m)->bytes;                                                            \
        b->src_device[r] = (src_dev);                                                        \
        b->dst_device[r] = (dst_dev);                                                        \
        b->graph_id[r] = (m)->graphId;                                                       \
        b->graph_node_id[r] = (m)->graphNodeId;                                              \
        if (++b->rows == XP_BATCH_ROWS) xp_emit_MEMCPY(b);                                   \
    } while (0)

static void add_memcpy(const CUpti_ActivityMemcpy6 *m) { PUSH_MEMCPY(m, m->deviceId, m->deviceId); }

static void add_p2p(const CUpti_ActivityMemcpyPtoP4 *m) { PUSH_MEMCPY(m, m->srcDeviceId, m->dstDeviceId); }

static void add_memset(const CUpti_ActivityMemset4 *m) {
    struct xp_batch_MEMSET *b = memset_batch;
    uint32_t r = b->rows;
    b->start[r] = m->start;
    b->end[r] = m->end;
    b->correlation_id[r] = m->correlationId;
    b->device[r] = m->deviceId;
    b->stream[r] = m->streamId;
    b->value[r] = m->value;
    b->bytes[r] = m->bytes;
    b->memory_kind[r] = m->memoryKind;
    b->graph_id[r] = m->graphId;
    b->graph_node_id[r] = m->graphNodeId;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_MEMSET(b);
}

/* XPU_PERF_SYNC_ACTIVITY=1: the device is left to the collector (its context's kernels). */
static void add_sync(const CUpti_ActivitySynchronization2 *s) {
    push_sync(s->start, s->end, s->correlationId, s->contextId, NO_ID, s->streamId,
              (uint32_t)s->type, s->cudaEventId);
}

static void add_marker(const CUpti_ActivityMarker2 *m) {
    struct xp_batch_MARKER *b = marker_batch;
    uint32_t r = b->rows;
    b->timestamp[r] = m->timestamp;
    b->marker_id[r] = m->id;
    b->flags[r] = (uint32_t)m->flags;
    b->tid[r] = m->objectKind == CUPTI_ACTIVITY_OBJECT_THREAD ? m->objectId.pt.threadId : 0;
    b->name_id[r] = m->name ? xp_intern(m->name) : 0;
    b->domain_id[r] = m->domain ? xp_intern(m->domain) : 0;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_MARKER(b);
}

/* An allocation or release of device memory (the counter track of memory in use and, joined
 * to its API call by correlation id, the call's launch stack as the allocation site). */
static void add_memory(const CUpti_ActivityMemory4 *m) {
    struct xp_batch_MEMORY *b = memory_batch;
    uint32_t r = b->rows;
    b->timestamp[r] = m->timestamp;
    b->correlation_id[r] = m->correlationId;
    b->device[r] = m->deviceId;
    b->operation[r] = (uint32_t)m->memoryOperationType;
    b->memory_kind[r] = (uint32_t)m->memoryKind;
    b->address[r] = m->address;
    b->bytes[r] = m->bytes;
    b->stream[r] = m->streamId;
    b->is_async[r] = m->isAsync;
    if (++b->rows == XP_BATCH_ROWS) xp_emit_MEMORY(b);
}

static void add_device(const CUpti_ActivityDevice5 *d) {
    struct xp_batch_DEVICE *b = device_batch;
    uint32_t r = b->rows;
    b->device[r] = d->id;
    const char *name = d->name ? d->name : "";
    b->name[r] = (struct xp_str){name, (uint32_t)strlen(name)};
    b->rows++;
    xp_emit_DEVICE(b); /* names point into CUPTI's buffer: encode now */
}

static void emit_activity_batches(void) {
    xp_emit_KERNEL(kernel_batch);
    xp_emit_MEMCPY(memcpy_batch);
    xp_emit_MEMSET(memset_batch);
    emit_sync_rows();
    xp_emit_MARKER(marker_batch);
    xp_emit_MEMORY(memory_batch);
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                      size_t size, size_t valid) {
    /* The program's own client's records first (program_records.c), from the buffer as CUPTI
     * filled it. */
    int kept = program_forward_buffer(ctx, stream_id, buffer, size, valid);
    if (!xp_exp.parse) valid = 0;
    pthread_mutex_lock(&activity_lock);
    counters.activity_buffers++;
    CUpti_Activity *rec = NULL;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
        if (!kind_ours(rec->kind)) { /* on for the program's client only */
            counters.records_program_only++;
            continue;
        }
        switch (rec->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
            add_kernel((const CUpti_ActivityKernel10 *)rec); counters.records_kernel++; break;
        case CUPTI_ACTIVITY_KIND_MEMCPY:
            add_memcpy((const CUpti_ActivityMemcpy6 *)rec); counters.records_memcpy++; break;
        case CUPTI_ACTIVITY_KIND_MEMCPY2:
            add_p2p((const CUpti_ActivityMemcpyPtoP4 *)rec); counters.records_memcpy++; break;
        case CUPTI_ACTIVITY_KIND_MEMSET:
            add_memset((const CUpti_ActivityMemset4 *)rec); counters.records_memset++; break;
        case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
            add_sync((const CUpti_ActivitySynchronization2 *)rec); counters.records_sync++; break;
        case CUPTI_ACTIVITY_KIND_MARKER:
            add_marker((const CUpti_ActivityMarker2 *)rec); counters.records_marker++; break;
        case CUPTI_ACTIVITY_KIND_MEMORY2:
            add_memory((const CUpti_ActivityMemory4 *)rec); counters.records_memory++; break;
        case CUPTI_ACTIVITY_KIND_DEVICE:
            add_device((const CUpti_ActivityDevice5 *)rec); break;
        default:
            counters.records_other++; break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped) == CUPTI_SUCCESS)
        counters.cupti_dropped += dropped;
    emit_activity_batches();
    pthread_mutex_unlock(&activity_lock);
    if (!kept) free(buffer);
}

static uint64_t CUPTIAPI timestamp_callback(void) { return xp_now_ns(); }

void activity_register(void) {
    /* CLOCK_MONOTONIC for GPU records too: the same clock as the API rows and CPU samples. */
    CHECK(cuptiActivityRegisterTimestampCallback(timestamp_callback));
    CHECK(cuptiSetThreadIdType(CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM));
    if (xp_config.device_buffer_mb) {
        size_t bytes = (size_t)xp_config.device_buffer_mb << 20, sz = sizeof bytes;
        CHECK(cuptiActivitySetAttribute(CUPTI_ACTIVITY_ATTR_DEVICE_BUFFER_SIZE, &sz, &bytes));
    }
    CHECK(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
    xp_experiments_enable_hw_trace();
    CHECK(kind_set(CUPTI_ACTIVITY_KIND_DEVICE, 1));
}

void activity_enable_kinds(void) {
    if (kind_wanted(XP_KIND_KERNEL)) enable_kind(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    if (kind_wanted(XP_KIND_MEMCPY)) {
        enable_kind(CUPTI_ACTIVITY_KIND_MEMCPY);
        enable_kind(CUPTI_ACTIVITY_KIND_MEMCPY2);
    }
    if (kind_wanted(XP_KIND_MEMSET)) enable_kind(CUPTI_ACTIVITY_KIND_MEMSET);
    if (kind_wanted(XP_KIND_MEMORY)) enable_kind(CUPTI_ACTIVITY_KIND_MEMORY2);
    if (kind_wanted(XP_KIND_SYNC)) {
        if (xp_exp.callbacks && !xp_config.sync_activity) sync_from_callbacks = 1;
        else enable_kind(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION);
    }
}

/* A forked child's stream starts empty: the rows the parent had pending are its own. */
void activity_fork_child(void) {
    pthread_mutex_init(&activity_lock, NULL);
    kernel_batch->rows = memcpy_batch->rows = memset_batch->rows = 0;
    sync_ops_fork_child();
    marker_batch->rows = 0;
    memory_batch->rows = 0;
}
