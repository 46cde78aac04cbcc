/* The launch stack of a traced API call: native frames from the cached CFI unwinder
 * (unwind.c) past this library's own, Python frames read from the interpreter (pyframes.c),
 * hashed and deduplicated in a lock-free table; a stack seen for the first time is sent as one
 * STACK row, and API rows name it by id. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "launch_stacks.h"
#include "config.h"
#include "experiments.h"
#include "modules.h"
#include "pyframes.h"
#include "state.h"
#include "stream.h"
#include "unwind.h"

#define MAX_NATIVE 128
#define MAX_PYTHON 128
#define STACK_TABLE_BITS 18

static _Atomic uint64_t *stack_table;
pthread_mutex_t stack_emit_lock = PTHREAD_MUTEX_INITIALIZER;
static struct xp_batch_STACK *stack_batch;
static unsigned long self_lo, self_hi; /* this library's code: not part of a stack */

int launch_stacks_init(void) {
    stack_table = calloc((size_t)1 << STACK_TABLE_BITS, sizeof(uint64_t));
    stack_batch = malloc(sizeof *stack_batch);
    return stack_table && stack_batch ? 0 : -1;
}

void launch_stacks_start(void) {
    xp_modules_self_range((const void *)&launch_stacks_start, &self_lo, &self_hi);
    if (xp_config.python) xp_py_init();
}

static inline uint64_t mix(uint64_t h, uint64_t v) {
    h ^= v + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

uint32_t capture_stack(struct thread_state *ts) {
    (void)ts;
    uint64_t pcs[MAX_NATIVE];
    struct xp_pyframe_key py[MAX_PYTHON];
    uint64_t c0 = xp_cycles();
    int n = xp_unwind(pcs, MAX_NATIVE);
    int skip = 0;
    while (skip < n && pcs[skip] >= self_lo && pcs[skip] < self_hi) skip++;
    uint64_t c1 = xp_cycles();
    int np = xp_config.python ? xp_py_walk(py, MAX_PYTHON) : 0;
    uint64_t c2 = xp_cycles();
    XP_SELFTIME({
        ts->st.cyc_unwind += c1 - c0;
        ts->st.cyc_python += c2 - c1;
        ts->st.native_frames += (uint64_t)(n - skip);
        ts->st.python_frames += (uint64_t)np;
    });
    (void)c0, (void)c1, (void)c2;
    if (n - skip <= 0 && np == 0) return 0;
    /* Four independent lanes: one serial multiply chain waits on each multiply in turn. */
    uint64_t lane[4] = {0x12345678ull, 0x9abcdef0ull, 0x0fedcba9ull, 0x87654321ull};
    int k = 0;
    for (int i = skip; i < n; i++, k = (k + 1) & 3) lane[k] = mix(lane[k], pcs[i]);
    lane[k] = mix(lane[k], 0xfeedull); /* native | python boundary */
    for (int i = 0; i < np; i++, k = (k + 1) & 3)
        lane[k] = mix(mix(lane[k], py[i].code), py[i].offset);
    uint64_t h = mix(mix(mix(mix(0x5bd1e995ull, lane[0]), lane[1]), lane[2]), lane[3]);
    h = mix(h, (uint64_t)(n - skip) << 32 | (uint64_t)np);
    if (h == 0) h = 1;
    const uint64_t mask = (1ull << STACK_TABLE_BITS) - 1;
    uint64_t idx = h & mask;
    for (int probe = 0; probe < 64; probe++, idx = (idx + 1) & mask) {
        uint64_t cur = atomic_load_explicit(&stack_table[idx], memory_order_acquire);
        if (cur == h) return (uint32_t)idx + 1;
        if (cur != 0) continue;
        uint64_t expected = 0;
        if (!atomic_compare_exchange_strong(&stack_table[idx], &expected, h)) {
            if (expected == h) return (uint32_t)idx + 1;
            continue;
        }
        /* First sight of this stack: send it (cold path). */
        uint32_t pyids[MAX_PYTHON];
        for (int i = 0; i < np; i++) pyids[i] = xp_py_frame_id(py[i]);
        pthread_mutex_lock(&stack_emit_lock);
        stack_batch->rows = 1;
        stack_batch->stack_id[0] = (uint32_t)idx + 1;
        stack_batch->native_pcs[0] = (struct xp_u64list){pcs + skip, (uint32_t)(n - skip)};
        stack_batch->python_frames[0] = (struct xp_u32list){pyids, (uint32_t)np};
        xp_emit_STACK(stack_batch);
        pthread_mutex_unlock(&stack_emit_lock);
        counters.stacks_unique++;
        return (uint32_t)idx + 1;
    }
    counters.stack_table_full++;
    return 0;
}

/* A forked child's stream has none of the parent's stacks: every stack is new again. */
void launch_stacks_fork_child(void) {
    pthread_mutex_init(&stack_emit_lock, NULL);
    memset((void *)stack_table, 0, sizeof(uint64_t) << STACK_TABLE_BITS);
}
