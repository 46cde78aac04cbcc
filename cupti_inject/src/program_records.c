/* The program's activity records (see program_profiler.c): each buffer CUPTI completes holds
 * our records and the client's; while the client's trace runs, the records of the kinds it
 * enabled are copied, record by record, into buffers from its own request callback, which
 * its completion callback then gets, as CUPTI would have handed them over.
 *
 * The client's buffer is filled across our buffers and handed back when full or when the
 * client flushes.  A record's bytes are the span from its start to the next record's; whatever CUPTI puts
 * before the first record of a buffer is taken to precede every record alike (the fake
 * CUPTI's size prefix; none in the real one), so cuptiActivityGetNextRecord walks a copy as it
 * walks the original.  The copy is fixed up where it differs from what the client would get
 * from CUPTI directly:
 *   - times: CUPTI stamps records with our clock (CLOCK_MONOTONIC, activity.c); the client gets
 *     them in the clock it would get from CUPTI: its own timestamp callback's (Kineto: the
 *     TSC), mapped linearly from pairs of readings of both clocks (the first at its
 *     registration, the second at each buffer), or else CUPTI's default, CLOCK_REALTIME;
 *     for the kinds whose times are known here;
 *   - a pointer into our buffer (a name stored in the buffer itself) would dangle once we free
 *     it: one into the record's own span is moved to the copy; for one elsewhere in the
 *     buffer, our buffer is kept until the client's next trace. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "program_records.h"
#include "kinds.h"
#include "state.h"
#include "stream.h"

_Atomic int program_forwarding;
static CUpti_BuffersCallbackRequestFunc client_requested;
static CUpti_BuffersCallbackCompleteFunc client_completed;
static CUpti_TimestampCallbackFunc client_clock;
static uint64_t clock0_ours, clock0_client;
static _Atomic uint64_t records_forwarded, buffers_forwarded, records_not_forwarded;
static _Atomic uint64_t records_clock_mapped, buffers_kept;
static pthread_mutex_t kept_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t **kept;
static size_t n_kept, kept_cap;

/* ---- the client's buffers ---- */
void program_records_set_buffers(CUpti_BuffersCallbackRequestFunc requested,
                                 CUpti_BuffersCallbackCompleteFunc completed) {
    client_requested = requested;
    client_completed = completed;
}

/* The client registered its buffer callbacks; a buffer from its request callback (0: none),
 * handed back filled. */
static int program_has_buffers(void) { return client_requested != NULL && client_completed != NULL; }

static int program_buffer(uint8_t **buffer, size_t *size) {
    CUpti_BuffersCallbackRequestFunc requested = client_requested;
    size_t max_records = 0;
    *buffer = NULL;
    *size = 0;
    if (!requested) return 0;
    requested(buffer, size, &max_records);
    return *buffer != NULL && *size > 0;
}

static void program_buffer_done(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                                size_t used) {
    CUpti_BuffersCallbackCompleteFunc completed = client_completed;
    if (completed) completed(ctx, stream_id, buffer, size, used);
}

/* ---- its clock ---- */
void program_clock_set(CUpti_TimestampCallbackFunc clock) {
    if (!clock) return;
    clock0_ours = xp_now_ns();
    clock0_client = clock();
    client_clock = clock;
}

/* Our clock to the client's: t' = theirs + slope * (t - ours). */
struct clock_map {
    uint64_t ours, theirs;
    double slope;
};

/* CUPTI's own clock where no timestamp callback is registered (its documented default). */
static uint64_t realtime_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static struct clock_map clock_now(void) {
    struct clock_map m = {xp_now_ns(), 0, 1.0};
    CUpti_TimestampCallbackFunc clock = client_clock;
    if (!clock) { /* both count nanoseconds: an offset */
        m.theirs = realtime_ns();
        return m;
    }
    m.theirs = clock();
    /* Under a millisecond apart, two readings give no slope worth trusting. */
    if (m.ours - clock0_ours >= 1000000ull)
        m.slope = (double)(int64_t)(m.theirs - clock0_client) / (double)(m.ours - clock0_ours);
    return m;
}

static void map_time(const struct clock_map *m, uint64_t *t) {
    if (*t == 0 || *t == CUPTI_TIMESTAMP_UNKNOWN) return;
    int64_t since = (int64_t)(*t - m->ours);
    *t = m->theirs + (uint64_t)(int64_t)(m->slope * (double)since);
}

/* Where a record was copied from and to. */
struct span {
    const uint8_t *buffer, *from;
    size_t size, len;
    uint8_t *to;
};

/* A pointer field of the copy: into the record's span, moved with it; 1: into our buffer
 * elsewhere (the buffer must be kept). */
static int move_pointer(const char **p, const struct span *s) {
    const uint8_t *q = (const uint8_t *)*p;
    if (q >= s->from && q < s->from + s->len) {
        *p = (const char *)(s->to + (q - s->from));
        return 0;
    }
    return q >= s->buffer && q < s->buffer + s->size;
}

/* The copy's times in the client's clock and its pointers off our buffer; 1: a pointer moved
 * (our buffer must outlive the client's use of the copy). */
static int fix_record(CUpti_Activity *rec, const struct span *s, const struct clock_map *m) {
    int moved = 0, mapped = 1;
    switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        CUpti_ActivityKernel10 *k = (CUpti_ActivityKernel10 *)rec;
        map_time(m, &k->start); map_time(m, &k->end); map_time(m, &k->completed);
        map_time(m, &k->queued); map_time(m, &k->submitted);
        moved |= move_pointer(&k->name, s);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
        CUpti_ActivityMemcpy6 *c = (CUpti_ActivityMemcpy6 *)rec;
        map_time(m, &c->start); map_time(m, &c->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY2: {
        CUpti_ActivityMemcpyPtoP4 *c = (CUpti_ActivityMemcpyPtoP4 *)rec;
        map_time(m, &c->start); map_time(m, &c->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
        CUpti_ActivityMemset4 *s = (CUpti_ActivityMemset4 *)rec;
        map_time(m, &s->start); map_time(m, &s->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER:
    case CUPTI_ACTIVITY_KIND_INTERNAL_LAUNCH_API: {
        CUpti_ActivityAPI *a = (CUpti_ActivityAPI *)rec;
        map_time(m, &a->start); map_time(m, &a->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        CUpti_ActivitySynchronization2 *s = (CUpti_ActivitySynchronization2 *)rec;
        map_time(m, &s->start); map_time(m, &s->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_OVERHEAD: {
        CUpti_ActivityOverhead3 *o = (CUpti_ActivityOverhead3 *)rec;
        map_time(m, &o->start); map_time(m, &o->end);
        break;
    }
    case CUPTI_ACTIVITY_KIND_MARKER: {
        CUpti_ActivityMarker2 *k = (CUpti_ActivityMarker2 *)rec;
        map_time(m, &k->timestamp);
        moved |= move_pointer(&k->name, s);
        moved |= move_pointer(&k->domain, s);
        break;
    }
    case CUPTI_ACTIVITY_KIND_DEVICE: {
        CUpti_ActivityDevice5 *d = (CUpti_ActivityDevice5 *)rec;
        moved |= move_pointer(&d->name, s);
        mapped = 0;
        break;
    }
    default: /* no times known here (EXTERNAL_CORRELATION has none) */
        mapped = 0;
        break;
    }
    if (mapped) records_clock_mapped++;
    return moved;
}

/* The client's buffer being filled: kept across our buffers (each of ours would otherwise
 * cost the client one of its buffers, and Kineto stops its trace past a number of them), handed
 * back when full and at each of its flushes. */
static pthread_mutex_t forward_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    CUcontext ctx;
    uint32_t stream_id;
    uint8_t *buffer;
    size_t size, used;
} filling;

/* Caller holds forward_lock. */
static void hand_back_filling(void) {
    if (!filling.buffer) return;
    program_buffer_done(filling.ctx, filling.stream_id, filling.buffer, filling.size, filling.used);
    buffers_forwarded++;
    filling.buffer = NULL;
}

void program_records_hand_back(void) {
    pthread_mutex_lock(&forward_lock);
    hand_back_filling();
    pthread_mutex_unlock(&forward_lock);
}

/* CUPTI holds one of the client's buffers from the moment its activity runs until it is
 * handed back, and the client may depend on it: Kineto's stop flushes only while one is out
 * (with none, its trace had no GPU activity at all: measured on the H100).  So one is taken
 * as soon as the client's kinds are on, and again after each hand-back while they are. */
void program_records_hold_buffer(void) {
    pthread_mutex_lock(&forward_lock);
    if (!filling.buffer && program_has_buffers()) {
        if (program_buffer(&filling.buffer, &filling.size)) {
            filling.used = 0;
            filling.ctx = NULL;
            filling.stream_id = 0;
        } else {
            filling.buffer = NULL;
        }
    }
    pthread_mutex_unlock(&forward_lock);
}

/* Copy one record's span into the client's buffer; 1: a pointer of it into our buffer stays. */
static int forward_record(uint8_t *span, size_t len, size_t head, uint8_t *buffer, size_t size,
                          const struct clock_map *m) {
    if (filling.buffer && filling.used + len > filling.size) hand_back_filling();
    if (!filling.buffer) {
        if (!program_buffer(&filling.buffer, &filling.size)) filling.buffer = NULL;
        filling.used = 0;
    }
    if (!filling.buffer || len > filling.size) {
        records_not_forwarded++; /* the client gave no buffer, or one too small */
        return 0;
    }
    uint8_t *to = filling.buffer + filling.used;
    memcpy(to, span, len);
    filling.used += len;
    records_forwarded++;
    struct span s = {buffer, span, size, len, to};
    return fix_record((CUpti_Activity *)(to + head), &s, m);
}

int program_forward_buffer(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                           size_t valid) {
    /* A client that registered no buffer callbacks yet would get nothing from CUPTI either
     * (Kineto enables the kernel kind at its start, its callbacks at its first trace). */
    if (!atomic_load(&program_forwarding) || valid == 0 || !program_has_buffers()) return 0;
    CUpti_Activity *rec = NULL;
    if (cuptiActivityGetNextRecord(buffer, valid, &rec) != CUPTI_SUCCESS) return 0;
    struct clock_map m = clock_now();
    size_t head = (size_t)((uint8_t *)rec - buffer); /* before each record (see the top) */
    int keep = 0;
    pthread_mutex_lock(&forward_lock);
    filling.ctx = ctx;
    filling.stream_id = stream_id;
    while (rec) {
        CUpti_Activity *next = rec;
        if (cuptiActivityGetNextRecord(buffer, valid, &next) != CUPTI_SUCCESS) next = NULL;
        uint8_t *span = (uint8_t *)rec - head;
        size_t len = (size_t)((next ? (uint8_t *)next - head : buffer + valid) - span);
        if (program_takes_kind(rec->kind))
            keep |= forward_record(span, len, head, buffer, size, &m);
        rec = next;
    }
    pthread_mutex_unlock(&forward_lock);
    if (!keep) return 0;
    pthread_mutex_lock(&kept_lock);
    if (n_kept == kept_cap) {
        size_t cap = kept_cap ? kept_cap * 2 : 16;
        uint8_t **grown = realloc(kept, cap * sizeof *kept);
        if (grown) {
            kept = grown;
            kept_cap = cap;
        }
    }
    int taken = n_kept < kept_cap;
    if (taken) kept[n_kept++] = buffer;
    pthread_mutex_unlock(&kept_lock);
    buffers_kept += (uint64_t)taken;
    return taken;
}

/* A new trace of the client: the buffers its last trace pointed into are done with. */
void program_records_epoch_start(void) {
    if (atomic_load(&program_forwarding)) return;
    pthread_mutex_lock(&kept_lock);
    for (size_t i = 0; i < n_kept; i++) free(kept[i]);
    n_kept = 0;
    pthread_mutex_unlock(&kept_lock);
}

void emit_program_record_counters(void) {
    xp_emit_counter("program_records_forwarded", records_forwarded);
    xp_emit_counter("program_buffers_forwarded", buffers_forwarded);
    xp_emit_counter("program_records_not_forwarded", records_not_forwarded);
    xp_emit_counter("program_records_clock_mapped", records_clock_mapped);
    xp_emit_counter("program_buffers_kept", buffers_kept);
}

void program_records_fork_child(void) {
    pthread_mutex_init(&kept_lock, NULL);
    pthread_mutex_init(&forward_lock, NULL);
    filling.buffer = NULL; /* the parent's client owns it */
    records_forwarded = buffers_forwarded = records_not_forwarded = 0;
    records_clock_mapped = buffers_kept = 0;
}
