/* See stack_table.h. */
#include "stack_table.h"

#include <stdlib.h>
#include <string.h>

int xp_stack_table_init(struct xp_stack_table *t, uint32_t id_bit, uint32_t first_slots,
                        uint32_t max_slots) {
    memset(t, 0, sizeof *t);
    t->id_bit = id_bit;
    t->first_slots = first_slots;
    t->max_slots = max_slots;
    t->next_id = 1;
    t->batch = malloc(sizeof *t->batch);
    if (!t->batch) return -1;
    t->batch->rows = 0;
    return 0;
}

/* FNV-1a over the counts, then each pc, then each Python (code, line). */
uint64_t xp_stack_hash(const uint64_t *pcs, int n_native, const struct xp_pyframe_key *python,
                       int n_python) {
    uint64_t h = 1469598103934665603ull ^ ((uint64_t)n_native << 32 | (uint32_t)n_python);
    for (int i = 0; i < n_native; i++) h = (h ^ pcs[i]) * 0x100000001b3ull;
    for (int i = 0; i < n_python; i++)
        h = ((h ^ python[i].code) * 0x100000001b3ull ^ python[i].offset) * 0x100000001b3ull;
    return h ? h : 1;
}

static uint32_t slot_of(uint64_t hash, uint32_t slots) {
    return (uint32_t)(hash >> 20) & (slots - 1);
}

static int grow(struct xp_stack_table *t) {
    uint32_t slots = t->slots ? t->slots * 2 : t->first_slots;
    if (slots > t->max_slots || slots == 0) return -1;
    uint64_t *hashes = calloc(slots, sizeof *hashes);
    uint32_t *ids = calloc(slots, sizeof *ids);
    if (!hashes || !ids) {
        free(hashes);
        free(ids);
        return -1;
    }
    for (uint32_t i = 0; i < t->slots; i++) {
        if (!t->hashes[i]) continue;
        uint32_t j = slot_of(t->hashes[i], slots);
        while (hashes[j]) j = (j + 1) & (slots - 1);
        hashes[j] = t->hashes[i];
        ids[j] = t->ids[i];
    }
    free(t->hashes);
    free(t->ids);
    t->hashes = hashes;
    t->ids = ids;
    t->slots = slots;
    return 0;
}

uint32_t xp_stack_table_intern(struct xp_stack_table *t, uint64_t hash, int *first) {
    *first = 0;
    if (!hash) hash = 1; /* 0 marks an empty slot */
    /* A stack seen before keeps its id when the table can take no more. */
    if (t->slots) {
        for (uint32_t j = slot_of(hash, t->slots); t->hashes[j]; j = (j + 1) & (t->slots - 1))
            if (t->hashes[j] == hash) return t->ids[j];
    }
    if (t->used * 2 >= t->slots && grow(t) != 0) {
        t->full++;
        return 0;
    }
    uint32_t j = slot_of(hash, t->slots);
    while (t->hashes[j]) j = (j + 1) & (t->slots - 1);
    uint32_t id = t->id_bit | t->next_id++;
    t->hashes[j] = hash;
    t->ids[j] = id;
    t->used++;
    *first = 1;
    return id;
}

uint32_t xp_stack_table_id(struct xp_stack_table *t, const uint64_t *pcs, int n_native,
                           const struct xp_pyframe_key *python, int n_python) {
    int first;
    uint32_t id = xp_stack_table_intern(t, xp_stack_hash(pcs, n_native, python, n_python), &first);
    if (!first) return id;
    uint32_t frames[n_python > 0 ? n_python : 1];
    for (int i = 0; i < n_python; i++) frames[i] = xp_py_frame_id_at_line(python[i]);
    t->batch->rows = 1;
    t->batch->stack_id[0] = id;
    t->batch->native_pcs[0] = (struct xp_u64list){pcs, (uint32_t)n_native};
    t->batch->python_frames[0] = (struct xp_u32list){frames, (uint32_t)n_python};
    xp_emit_STACK(t->batch);
    return id;
}

void xp_stack_table_reset(struct xp_stack_table *t) {
    free(t->hashes);
    free(t->ids);
    t->hashes = NULL;
    t->ids = NULL;
    t->slots = t->used = 0;
    t->next_id = 1;
    t->full = 0;
    if (t->batch) t->batch->rows = 0;
}

void xp_stack_table_free(struct xp_stack_table *t) {
    xp_stack_table_reset(t);
    free(t->batch);
    t->batch = NULL;
}
