/* See kinds.h: the activity kinds on in CUPTI while we or the program want them. */
#include "kinds.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>

#define KINDS 128 /* CUpti_ActivityKind values followed here (CUDA 13: < 70) */

static pthread_mutex_t kinds_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t our_kinds[KINDS], cupti_kinds[KINDS], ever_ours[KINDS];
static uint8_t program_kinds[KINDS]; /* on for the program now */
static uint8_t epoch_kinds[KINDS];   /* enabled since its last flush with none on: forwarded */

static CUptiResult kind_apply(int kind) {
    uint8_t want = our_kinds[kind] || program_kinds[kind];
    if (want == cupti_kinds[kind]) return CUPTI_SUCCESS;
    CUptiResult r = want ? cuptiActivityEnable((CUpti_ActivityKind)kind)
                         : cuptiActivityDisable((CUpti_ActivityKind)kind);
    if (r == CUPTI_SUCCESS) cupti_kinds[kind] = want;
    return r;
}

CUptiResult kind_set(CUpti_ActivityKind kind, int on) {
    if ((unsigned)kind >= KINDS) return on ? cuptiActivityEnable(kind) : cuptiActivityDisable(kind);
    pthread_mutex_lock(&kinds_lock);
    our_kinds[kind] = (uint8_t)(on != 0);
    if (on) ever_ours[kind] = 1;
    CUptiResult r = kind_apply((int)kind);
    pthread_mutex_unlock(&kinds_lock);
    return r;
}

int kind_ours(CUpti_ActivityKind kind) { return (unsigned)kind >= KINDS || ever_ours[kind]; }

CUptiResult program_kind_set(int kind, int on) {
    if (kind < 0 || kind >= KINDS) return CUPTI_ERROR_INVALID_KIND;
    pthread_mutex_lock(&kinds_lock);
    program_kinds[kind] = (uint8_t)(on != 0);
    if (on) epoch_kinds[kind] = 1;
    CUptiResult r = kind_apply(kind);
    pthread_mutex_unlock(&kinds_lock);
    return r;
}

int program_takes_kind(CUpti_ActivityKind kind) {
    return (unsigned)kind < KINDS && epoch_kinds[kind];
}

int program_kinds_flush(void) {
    pthread_mutex_lock(&kinds_lock);
    int on = 0;
    for (int k = 0; k < KINDS && !on; k++) on = program_kinds[k];
    if (!on) memset(epoch_kinds, 0, sizeof epoch_kinds);
    pthread_mutex_unlock(&kinds_lock);
    return on;
}

void kinds_fork_child(void) { pthread_mutex_init(&kinds_lock, NULL); }
