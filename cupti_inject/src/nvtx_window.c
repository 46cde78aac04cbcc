/* NVTX capture range: which NVTX calls open and close the window (nvtx_window.h).
 * Nesting is NVTX's own: per thread and domain for push/pop, by range id for start/end.  The
 * library counts push levels itself rather than trusting the calls' return values, so it
 * follows ranges from its subscription on; a range pushed before is never the window's. */
#define _GNU_SOURCE
#include <generated_nvtx_meta.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "nvtx_window.h"

#define MAX_DOMAINS 64
#define MAX_STRINGS 256
#define THREAD_DOMAINS 8

static char range_name[256];
static char domain_name[256]; /* empty: any domain */
/* The domains created with domain_name, and the registered strings equal to range_name:
 * handles are compared, never dereferenced. */
static const void *_Atomic wanted_domains[MAX_DOMAINS];
static const void *_Atomic name_strings[MAX_STRINGS];
static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic int n_wanted_domains, n_name_strings;
static _Atomic unsigned long long untracked;

/* The window's range: by push level on one thread and domain, or by start/end id. */
static pthread_mutex_t window_lock = PTHREAD_MUTEX_INITIALIZER;
static int window_by_push, window_by_id;
static nvtxRangeId_t window_id;

struct domain_levels {
    const void *domain;
    int level;        /* pushes open now */
    int window_level; /* the level whose pop closes the window; -1: none here */
};
static __thread struct domain_levels thread_domains[THREAD_DOMAINS];
static __thread int thread_domains_used;

int xp_nvtx_window_configure(const char *spec) {
    const char *at = strrchr(spec, '@');
    size_t name_len = at ? (size_t)(at - spec) : strlen(spec);
    if (name_len == 0 || name_len >= sizeof range_name) return -1;
    memcpy(range_name, spec, name_len);
    range_name[name_len] = 0;
    if (at) {
        if (!at[1] || strlen(at + 1) >= sizeof domain_name) return -1;
        strcpy(domain_name, at + 1);
    }
    return 0;
}

CUptiResult xp_nvtx_window_enable(CUpti_SubscriberHandle subscriber) {
    static const CUpti_CallbackId ids[] = {
        CUPTI_CBID_NVTX_nvtxRangePushA,         CUPTI_CBID_NVTX_nvtxRangePushEx,
        CUPTI_CBID_NVTX_nvtxRangePop,           CUPTI_CBID_NVTX_nvtxRangeStartA,
        CUPTI_CBID_NVTX_nvtxRangeStartEx,       CUPTI_CBID_NVTX_nvtxRangeEnd,
        CUPTI_CBID_NVTX_nvtxDomainRangePushEx,  CUPTI_CBID_NVTX_nvtxDomainRangePop,
        CUPTI_CBID_NVTX_nvtxDomainRangeStartEx, CUPTI_CBID_NVTX_nvtxDomainRangeEnd,
        CUPTI_CBID_NVTX_nvtxDomainCreateA,      CUPTI_CBID_NVTX_nvtxDomainRegisterStringA,
    };
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
        CUptiResult r = cuptiEnableCallback(1, subscriber, CUPTI_CB_DOMAIN_NVTX, ids[i]);
        if (r != CUPTI_SUCCESS) return r;
    }
    return CUPTI_SUCCESS;
}

static int handle_in(const void *_Atomic *set, _Atomic int *n, const void *h) {
    int count = atomic_load_explicit(n, memory_order_acquire);
    for (int i = 0; i < count; i++)
        if (atomic_load_explicit(&set[i], memory_order_relaxed) == h) return 1;
    return 0;
}

/* Handles are added (rarely: domain creation, string registration) under a lock and read
 * without one: the slot is written before the count that publishes it. */
static void remember(const void *_Atomic *set, _Atomic int *n, int cap, const void *h) {
    pthread_mutex_lock(&handles_lock);
    int count = atomic_load_explicit(n, memory_order_relaxed);
    if (count < cap) {
        atomic_store_explicit(&set[count], h, memory_order_relaxed);
        atomic_store_explicit(n, count + 1, memory_order_release);
    } else {
        untracked++;
    }
    pthread_mutex_unlock(&handles_lock);
}

static int domain_wanted(const void *domain) {
    if (!domain_name[0]) return 1;
    if (!domain) return 0; /* the default domain has no name */
    return handle_in(wanted_domains, &n_wanted_domains, domain);
}

static int attrib_is_name(const nvtxEventAttributes_t *a) {
    if (!a) return 0;
    if (a->messageType == NVTX_MESSAGE_TYPE_ASCII)
        return a->message.ascii && strcmp(a->message.ascii, range_name) == 0;
    if (a->messageType == NVTX_MESSAGE_TYPE_REGISTERED)
        return handle_in(name_strings, &n_name_strings, a->message.registered);
    return 0;
}

static struct domain_levels *levels_of(const void *domain) {
    for (int i = 0; i < thread_domains_used; i++)
        if (thread_domains[i].domain == domain) return &thread_domains[i];
    if (thread_domains_used == THREAD_DOMAINS) return NULL;
    struct domain_levels *d = &thread_domains[thread_domains_used++];
    d->domain = domain;
    d->level = 0;
    d->window_level = -1;
    return d;
}

static enum xp_nvtx_window_event on_push(const void *domain, int matches) {
    struct domain_levels *d = levels_of(domain);
    if (!d) { untracked++; return XP_NVTX_NONE; }
    int level = d->level++;
    if (!matches || !domain_wanted(domain)) return XP_NVTX_NONE;
    pthread_mutex_lock(&window_lock);
    enum xp_nvtx_window_event e = XP_NVTX_NONE;
    if (!window_by_push && !window_by_id) {
        window_by_push = 1;
        d->window_level = level;
        e = XP_NVTX_OPEN;
    }
    pthread_mutex_unlock(&window_lock);
    return e;
}

static enum xp_nvtx_window_event on_pop(const void *domain) {
    struct domain_levels *d = levels_of(domain);
    if (!d || d->level == 0) return XP_NVTX_NONE; /* a pop of a push from before we listened */
    int level = --d->level;
    if (d->window_level != level) return XP_NVTX_NONE;
    d->window_level = -1;
    pthread_mutex_lock(&window_lock);
    window_by_push = 0;
    pthread_mutex_unlock(&window_lock);
    return XP_NVTX_CLOSE;
}

static enum xp_nvtx_window_event on_start(const void *domain, int matches, const void *ret) {
    if (!matches || !domain_wanted(domain)) return XP_NVTX_NONE;
    if (!ret) { untracked++; return XP_NVTX_NONE; } /* no id: its end could not be found */
    pthread_mutex_lock(&window_lock);
    enum xp_nvtx_window_event e = XP_NVTX_NONE;
    if (!window_by_push && !window_by_id) {
        window_by_id = 1;
        window_id = *(const nvtxRangeId_t *)ret;
        e = XP_NVTX_OPEN;
    }
    pthread_mutex_unlock(&window_lock);
    return e;
}

static enum xp_nvtx_window_event on_end(nvtxRangeId_t id) {
    pthread_mutex_lock(&window_lock);
    enum xp_nvtx_window_event e = XP_NVTX_NONE;
    if (window_by_id && window_id == id) {
        window_by_id = 0;
        e = XP_NVTX_CLOSE;
    }
    pthread_mutex_unlock(&window_lock);
    return e;
}

enum xp_nvtx_window_event xp_nvtx_window_event(CUpti_CallbackId cbid, const CUpti_NvtxData *data) {
    const void *p = data->functionParams;
    const void *ret = data->functionReturnValue;
    switch (cbid) {
    case CUPTI_CBID_NVTX_nvtxDomainCreateA: {
        const nvtxDomainCreateA_params *c = p;
        if (domain_name[0] && ret && c->name && strcmp(c->name, domain_name) == 0)
            remember(wanted_domains, &n_wanted_domains, MAX_DOMAINS,
                     *(const nvtxDomainHandle_t *)ret);
        return XP_NVTX_NONE;
    }
    case CUPTI_CBID_NVTX_nvtxDomainRegisterStringA: {
        const nvtxDomainRegisterStringA_params *r = p;
        if (ret && r->string && strcmp(r->string, range_name) == 0)
            remember(name_strings, &n_name_strings, MAX_STRINGS,
                     *(const nvtxStringHandle_t *)ret);
        return XP_NVTX_NONE;
    }
    case CUPTI_CBID_NVTX_nvtxRangePushA: {
        const nvtxRangePushA_params *a = p;
        return on_push(NULL, a->message && strcmp(a->message, range_name) == 0);
    }
    case CUPTI_CBID_NVTX_nvtxRangePushEx:
        return on_push(NULL, attrib_is_name(((const nvtxRangePushEx_params *)p)->eventAttrib));
    case CUPTI_CBID_NVTX_nvtxDomainRangePushEx: {
        const nvtxDomainRangePushEx_params *d = p;
        return on_push(d->domain, attrib_is_name(d->core.eventAttrib));
    }
    case CUPTI_CBID_NVTX_nvtxRangePop: return on_pop(NULL);
    case CUPTI_CBID_NVTX_nvtxDomainRangePop:
        return on_pop(((const nvtxDomainRangePop_params *)p)->domain);
    case CUPTI_CBID_NVTX_nvtxRangeStartA: {
        const nvtxRangeStartA_params *a = p;
        return on_start(NULL, a->message && strcmp(a->message, range_name) == 0, ret);
    }
    case CUPTI_CBID_NVTX_nvtxRangeStartEx:
        return on_start(NULL, attrib_is_name(((const nvtxRangeStartEx_params *)p)->eventAttrib),
                        ret);
    case CUPTI_CBID_NVTX_nvtxDomainRangeStartEx: {
        const nvtxDomainRangeStartEx_params *d = p;
        return on_start(d->domain, attrib_is_name(d->core.eventAttrib), ret);
    }
    case CUPTI_CBID_NVTX_nvtxRangeEnd: return on_end(((const nvtxRangeEnd_params *)p)->id);
    case CUPTI_CBID_NVTX_nvtxDomainRangeEnd:
        return on_end(((const nvtxDomainRangeEnd_params *)p)->core.id);
    default: return XP_NVTX_NONE;
    }
}

unsigned long long xp_nvtx_window_untracked(void) { return atomic_load(&untracked); }
