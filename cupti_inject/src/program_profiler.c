/* The program's own CUPTI client (torch.profiler's Kineto, a tool of its own), seen through the
 * preloaded sampler library's interposed entry points (cupti_interpose.h), served from this
 * library's CUPTI session.  CUPTI has one subscriber per process, and it is ours: the client
 * gets a subscriber handle of its own (this file's), the callbacks it enables are turned on
 * for our subscriber too and forwarded to it from on_callback, and the activity kinds it
 * enables are on in CUPTI while either of us wants them, so each buffer CUPTI completes holds
 * the records of both; program_records.c copies the client's kinds into the client's own
 * buffers.  XPU_PERF_PROGRAM_PROFILER=refuse instead answers the client as CUPTI would with a
 * subscriber in place (and keeps it off our session's activity), so its profile has no GPU
 * activity: today's behaviour, made explicit.  Either way every call is counted by entry
 * point, caller module and outcome (PROGRAM_CUPTI rows at the final flush).
 *
 * --capture-range torch-profiler: Kineto enables its kinds when its warmup starts, pushes an
 * external correlation id per operator only while its trace is active, and disables its kinds
 * when the trace stops; our window opens at the first push after an enable and closes at the
 * first disable. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include "program_profiler.h"
#include "config.h"
#include "cupti_interpose.h"
#include "kinds.h"
#include "program_records.h"
#include "state.h"
#include "stream.h"
#include "windows.h"

#define CB_IDS 2048 /* callback ids per domain (CUDA 13's driver domain: < 1000) */
#define MAX_CALL_ROWS 32

enum outcome { SERVED, REFUSED, PASSED, IGNORED };
static const char *const outcome_names[] = {"served", "refused", "passed to CUPTI", "ignored"};

static struct {
    CUpti_CallbackFunc callback;
    void *userdata;
    int subscribed;
    uint8_t callbacks[CUPTI_CB_DOMAIN_SIZE][CB_IDS];
} client;
#define SERVED_HANDLE ((CUpti_SubscriberHandle)&client)

static pthread_mutex_t client_lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_SubscriberHandle our_subscriber;
_Atomic int program_callbacks_on; /* the client has callbacks on: on_callback forwards */
/* Whether our subscriber needs a callback on now (api_callbacks.c's, handed over at attach):
 * the client turning it off leaves it on. */
static int (*ours_needed)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
_Atomic uint64_t program_callbacks_forwarded;

/* ---- callbacks: on for our subscriber while we or the program want them ---- */
int program_wants_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid) {
    return (unsigned)domain < CUPTI_CB_DOMAIN_SIZE && cbid < CB_IDS && client.callbacks[domain][cbid];
}

void program_forward_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data) {
    CUpti_CallbackFunc callback = client.callback;
    if (!callback || !program_wants_callback(domain, cbid)) return;
    atomic_fetch_add_explicit(&program_callbacks_forwarded, 1, memory_order_relaxed);
    callback(client.userdata, domain, cbid, data);
}

static void count_callbacks_on(void) {
    int on = 0;
    for (int d = 0; d < CUPTI_CB_DOMAIN_SIZE && !on; d++)
        for (int c = 0; c < CB_IDS && !on; c++) on = client.callbacks[d][c];
    atomic_store(&program_callbacks_on, on);
}

/* The client's callback (domain, cbid) on or off; ours stays on where we need it. */
static CUptiResult client_callback_set(uint32_t enable, CUpti_CallbackDomain domain,
                                       CUpti_CallbackId cbid) {
    if ((unsigned)domain >= CUPTI_CB_DOMAIN_SIZE || cbid >= CB_IDS) return CUPTI_ERROR_INVALID_PARAMETER;
    client.callbacks[domain][cbid] = (uint8_t)(enable != 0);
    if (!enable && ours_needed && ours_needed(domain, cbid)) return CUPTI_SUCCESS;
    return cuptiEnableCallback(enable ? 1 : 0, our_subscriber, domain, cbid);
}

static CUptiResult client_domain_set(uint32_t enable, CUpti_CallbackDomain domain) {
    if ((unsigned)domain >= CUPTI_CB_DOMAIN_SIZE) return CUPTI_ERROR_INVALID_PARAMETER;
    memset(client.callbacks[domain], enable ? 1 : 0, CB_IDS);
    CUptiResult r = cuptiEnableDomain(enable ? 1 : 0, our_subscriber, domain);
    if (!enable) /* the domain off for the client: ours back on */
        for (CUpti_CallbackId c = 0; c < CB_IDS; c++)
            if (ours_needed && ours_needed(domain, c)) cuptiEnableCallback(1, our_subscriber, domain, c);
    return r;
}

static void client_unsubscribe(void) {
    for (int d = 0; d < CUPTI_CB_DOMAIN_SIZE; d++)
        for (CUpti_CallbackId c = 0; c < CB_IDS; c++)
            if (client.callbacks[d][c]) client_callback_set(0, (CUpti_CallbackDomain)d, c);
    client.callback = NULL;
    client.subscribed = 0;
}

/* ---- counts: one row per entry point, caller and outcome ---- */
static struct {
    uint8_t entry, outcome;
    char caller[64];
    uint64_t calls;
} call_rows[MAX_CALL_ROWS];
static int n_call_rows;
static uint64_t call_rows_full;

static void count_call(const struct xp_cupti_call *call, enum outcome outcome) {
    const char *caller = call->caller ? call->caller : "?";
    int i;
    for (i = 0; i < n_call_rows; i++)
        if (call_rows[i].entry == call->entry && call_rows[i].outcome == outcome &&
            strcmp(call_rows[i].caller, caller) == 0)
            break;
    if (i == n_call_rows) {
        if (n_call_rows == MAX_CALL_ROWS) {
            call_rows_full++;
            return;
        }
        n_call_rows++;
        call_rows[i].entry = (uint8_t)call->entry;
        call_rows[i].outcome = (uint8_t)outcome;
        snprintf(call_rows[i].caller, sizeof call_rows[i].caller, "%s", caller);
        call_rows[i].calls = 0;
    }
    call_rows[i].calls++;
}

void emit_program_cupti(void) {
    struct xp_batch_PROGRAM_CUPTI *b = calloc(1, sizeof *b);
    if (b) {
        pthread_mutex_lock(&client_lock);
        for (int i = 0; i < n_call_rows; i++) {
            const char *api = xp_cupti_entry_name(call_rows[i].entry);
            const char *outcome = outcome_names[call_rows[i].outcome];
            uint32_t r = b->rows++;
            b->api[r] = (struct xp_str){api, (uint32_t)strlen(api)};
            b->caller[r] = (struct xp_str){call_rows[i].caller, (uint32_t)strlen(call_rows[i].caller)};
            b->calls[r] = call_rows[i].calls;
            b->outcome[r] = (struct xp_str){outcome, (uint32_t)strlen(outcome)};
        }
        pthread_mutex_unlock(&client_lock);
        xp_emit_PROGRAM_CUPTI(b);
        free(b);
    }
    xp_emit_counter("program_cupti_rows_full", call_rows_full);
    xp_emit_counter("program_callbacks_forwarded", program_callbacks_forwarded);
    emit_program_record_counters();
}

/* ---- --capture-range torch-profiler ---- */
static atomic_int watch_push;

static void program_push(void) {
    if (atomic_exchange(&watch_push, 0)) open_window("torch-profiler");
}

static void follow_client_activity(int enabled) {
    if (window_mode != WINDOW_PROGRAM_PROFILER) return;
    if (enabled) {
        if (!atomic_load(&window_open)) atomic_store(&watch_push, 1);
    } else {
        atomic_store(&watch_push, 0);
        close_window("torch-profiler stop");
    }
}

/* ---- the program's calls ---- */
static int answer(const struct xp_cupti_call *call, enum outcome outcome, int result, int *out) {
    count_call(call, outcome);
    *out = result;
    return 1;
}

static int is_subscribe(const struct xp_cupti_call *call) {
    return call->entry == XP_CUPTI_SUBSCRIBE || call->entry == XP_CUPTI_SUBSCRIBE_V2;
}

static int refuse(const struct xp_cupti_call *call, int *result) {
    if (call->entry == XP_CUPTI_SUBSCRIBE_V2 && call->arg[3]) {
        /* As CUPTI does: the refused subscriber learns who holds CUPTI. */
        CUpti_SubscriberParams *params = (CUpti_SubscriberParams *)call->arg[3];
        if (params->oldSubscriberName && params->oldSubscriberSize)
            snprintf(params->oldSubscriberName, params->oldSubscriberSize, "xpu-perf record");
    }
    int r = is_subscribe(call) ? CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                               : CUPTI_ERROR_INVALID_OPERATION;
    return answer(call, REFUSED, r, result);
}

/* Serve one call (client_lock held); 0: not the client's (another handle), CUPTI answers. */
static int serve(const struct xp_cupti_call *call, int *result) {
    const uintptr_t *a = call->arg;
    switch (call->entry) {
    case XP_CUPTI_SUBSCRIBE:
    case XP_CUPTI_SUBSCRIBE_V2:
        if (client.subscribed) return refuse(call, result); /* a second client of the program */
        client.callback = (CUpti_CallbackFunc)a[1];
        client.userdata = (void *)a[2];
        client.subscribed = 1;
        *(CUpti_SubscriberHandle *)a[0] = SERVED_HANDLE;
        return answer(call, SERVED, CUPTI_SUCCESS, result);
    case XP_CUPTI_GET_CALLBACK_STATE: {
        if ((CUpti_SubscriberHandle)a[1] != SERVED_HANDLE) return 0;
        if (!a[0]) return answer(call, SERVED, CUPTI_ERROR_INVALID_PARAMETER, result);
        *(uint32_t *)a[0] = (uint32_t)program_wants_callback((CUpti_CallbackDomain)a[2],
                                                             (CUpti_CallbackId)a[3]);
        return answer(call, SERVED, CUPTI_SUCCESS, result);
    }
    case XP_CUPTI_UNSUBSCRIBE:
        if ((CUpti_SubscriberHandle)a[0] != SERVED_HANDLE) return 0;
        client_unsubscribe();
        count_callbacks_on();
        return answer(call, SERVED, CUPTI_SUCCESS, result);
    case XP_CUPTI_ENABLE_CALLBACK: {
        if ((CUpti_SubscriberHandle)a[1] != SERVED_HANDLE) return 0;
        CUptiResult r = client_callback_set((uint32_t)a[0], (CUpti_CallbackDomain)a[2],
                                            (CUpti_CallbackId)a[3]);
        count_callbacks_on();
        return answer(call, SERVED, r, result);
    }
    case XP_CUPTI_ENABLE_DOMAIN: {
        if ((CUpti_SubscriberHandle)a[1] != SERVED_HANDLE) return 0;
        CUptiResult r = client_domain_set((uint32_t)a[0], (CUpti_CallbackDomain)a[2]);
        count_callbacks_on();
        return answer(call, SERVED, r, result);
    }
    case XP_CUPTI_ENABLE_ALL_DOMAINS: {
        if ((CUpti_SubscriberHandle)a[1] != SERVED_HANDLE) return 0;
        CUptiResult r = CUPTI_SUCCESS;
        for (int d = 1; d < CUPTI_CB_DOMAIN_SIZE; d++) {
            CUptiResult rd = client_domain_set((uint32_t)a[0], (CUpti_CallbackDomain)d);
            if (rd != CUPTI_SUCCESS && rd != CUPTI_ERROR_INVALID_PARAMETER) r = rd;
        }
        count_callbacks_on();
        return answer(call, SERVED, r, result);
    }
    case XP_CUPTI_ACTIVITY_REGISTER_CALLBACKS:
        program_records_set_buffers((CUpti_BuffersCallbackRequestFunc)a[0],
                                    (CUpti_BuffersCallbackCompleteFunc)a[1]);
        return answer(call, SERVED, CUPTI_SUCCESS, result);
    case XP_CUPTI_ACTIVITY_ENABLE:
    case XP_CUPTI_ACTIVITY_ENABLE_CONTEXT: {
        /* A context's kind is served for every context: more than asked, never less. */
        int kind = (int)(call->entry == XP_CUPTI_ACTIVITY_ENABLE ? a[0] : a[1]);
        CUptiResult r = program_kind_set(kind, 1);
        if (r == CUPTI_SUCCESS) {
            program_records_epoch_start();
            atomic_store(&program_forwarding, 1);
        }
        return answer(call, SERVED, r, result);
    }
    case XP_CUPTI_ACTIVITY_DISABLE:
    case XP_CUPTI_ACTIVITY_DISABLE_CONTEXT: {
        int kind = (int)(call->entry == XP_CUPTI_ACTIVITY_DISABLE ? a[0] : a[1]);
        return answer(call, SERVED, program_kind_set(kind, 0), result);
    }
    case XP_CUPTI_TIMESTAMP_CALLBACK:
        program_clock_set((CUpti_TimestampCallbackFunc)a[0]);
        return answer(call, SERVED, CUPTI_SUCCESS, result);
    case XP_CUPTI_FINALIZE: /* it would end our session too */
        return answer(call, IGNORED, CUPTI_SUCCESS, result);
    default: /* the counters' profiler API: CUPTI answers */
        count_call(call, PASSED);
        return 0;
    }
}

/* The flush is served outside client_lock: CUPTI calls buffer_completed (which forwards to the
 * client) before it returns. */
static int serve_flush(const struct xp_cupti_call *call, int *result) {
    CUptiResult r = cuptiActivityFlushAll((uint32_t)call->arg[0]);
    program_records_hand_back(); /* what CUPTI would have completed by now */
    pthread_mutex_lock(&client_lock);
    count_call(call, SERVED);
    int on = program_kinds_flush();
    if (!on) atomic_store(&program_forwarding, 0); /* its last flush of the trace */
    pthread_mutex_unlock(&client_lock);
    if (on) program_records_hold_buffer(); /* its trace goes on: CUPTI would hold the next */
    *result = r;
    return 1;
}

static int program_call(const struct xp_cupti_call *call, int *result) {
    if (atomic_load(&cupti_forked)) { /* CUDA and CUPTI are unusable in a forked child */
        pthread_mutex_lock(&client_lock);
        count_call(call, REFUSED);
        pthread_mutex_unlock(&client_lock);
        *result = CUPTI_ERROR_NOT_INITIALIZED;
        return 1;
    }
    int no_session = is_subscribe(call) && !our_subscriber;
    if (no_session || call->entry == XP_CUPTI_PROFILER_INITIALIZE) {
        /* No subscriber of ours to share (callbacks off): the program's own goes to CUPTI. */
        pthread_mutex_lock(&client_lock);
        count_call(call, PASSED);
        pthread_mutex_unlock(&client_lock);
        return 0;
    }
    if (xp_config.program_profiler_refuse) {
        pthread_mutex_lock(&client_lock);
        int handled = refuse(call, result);
        pthread_mutex_unlock(&client_lock);
        return handled;
    }
    if (call->entry == XP_CUPTI_ACTIVITY_FLUSH_ALL) return serve_flush(call, result);
    pthread_mutex_lock(&client_lock);
    int handled = serve(call, result);
    pthread_mutex_unlock(&client_lock);
    if (handled && *result == CUPTI_SUCCESS) {
        if (call->entry == XP_CUPTI_ACTIVITY_ENABLE ||
            call->entry == XP_CUPTI_ACTIVITY_ENABLE_CONTEXT) {
            program_records_hold_buffer();
            follow_client_activity(1);
        } else if (call->entry == XP_CUPTI_ACTIVITY_DISABLE ||
                   call->entry == XP_CUPTI_ACTIVITY_DISABLE_CONTEXT) {
            follow_client_activity(0);
        } else if (call->entry == XP_CUPTI_ACTIVITY_REGISTER_CALLBACKS &&
                   atomic_load(&program_forwarding)) {
            program_records_hold_buffer(); /* its kinds were on before its callbacks */
        }
    }
    return handled;
}

/* ---- set-up ---- */
void program_profiler_register(void) {
    static struct xp_cupti_host host;
    Dl_info self;
    void (*register_host)(const struct xp_cupti_host *) =
        (void (*)(const struct xp_cupti_host *))dlsym(RTLD_DEFAULT, "xpu_perf_cupti_host");
    if (!register_host || !dladdr((const void *)&program_profiler_register, &self)) return;
    host.base = self.dli_fbase;
    host.program_call = program_call;
    host.watch_push = &watch_push;
    host.program_push = program_push;
    register_host(&host);
}

void program_profiler_attach(CUpti_SubscriberHandle subscriber,
                             int (*needed)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)) {
    our_subscriber = subscriber;
    ours_needed = needed;
}

/* The final flush: the client is not fed while the process ends (its objects may be gone). */
void program_profiler_final(void) { atomic_store(&program_forwarding, 0); }


void program_profiler_fork_child(void) {
    pthread_mutex_init(&client_lock, NULL);
    kinds_fork_child();
    n_call_rows = 0;
    call_rows_full = 0;
    program_callbacks_forwarded = 0;
    atomic_store(&program_forwarding, 0);
    atomic_store(&watch_push, 0);
}
