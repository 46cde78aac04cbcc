/* Stack deduplication for the CPU sampler (sampler.c) and the waits (waits.c): a stack's
 * content (native pcs, Python code objects and lines) -> its STACK id, the STACK row written
 * the first time the stack is seen, so a stack repeated by thousands of samples is written
 * once.  Ids are dense from 1 in the order of first sight, or'ed with the table's id bit
 * (the waits' ids have the top bit: one STACK id space per stream, two tables in it).
 *
 * The key is a 64-bit hash of the content: two different stacks with the same hash share an
 * id (a chance of about n^2 / 2^65 for n distinct stacks).  Open addressing, grown by
 * doubling at half load up to max_slots; a new stack that finds the table at its bound (or
 * no memory to grow) gets id 0, "no stack", and is counted in `full`: its sample or wait is
 * kept, its stack is not, and the count says so.
 *
 * Single-threaded: each table is used by one thread at a time (the sampler's scanner, under
 * its drain lock).  Calls only the stream (STACK rows) and the Python reader (frame ids). */
#ifndef XPU_PERF_STACK_TABLE_H
#define XPU_PERF_STACK_TABLE_H

#include <stdint.h>

#include "pyframes.h"
#include "stream.h"

/* The bound of a product table: 2^23 distinct stacks, 192 MiB of table at the most. */
#define XP_STACK_TABLE_MAX_SLOTS (1u << 24)

struct xp_stack_table {
    uint64_t *hashes; /* 0: an empty slot */
    uint32_t *ids;
    uint32_t slots, used, next_id;
    uint32_t first_slots, max_slots; /* powers of two */
    uint32_t id_bit;
    uint64_t full; /* new stacks that got no id: the table at its bound, or no memory */
    struct xp_batch_STACK *batch;
};

/* An empty table (allocated at the first stack).  first_slots and max_slots are powers of
 * two, first_slots <= max_slots <= XP_STACK_TABLE_MAX_SLOTS.  Returns 0, or -1 without
 * memory for its STACK batch. */
int xp_stack_table_init(struct xp_stack_table *t, uint32_t id_bit, uint32_t first_slots,
                        uint32_t max_slots);
/* The id of this stack; its STACK row is written the first time.  0: no id (counted in
 * t->full). */
uint32_t xp_stack_table_id(struct xp_stack_table *t, const uint64_t *pcs, int n_native,
                           const struct xp_pyframe_key *python, int n_python);
/* The content hash xp_stack_table_id keys on (never 0). */
uint64_t xp_stack_hash(const uint64_t *pcs, int n_native, const struct xp_pyframe_key *python,
                       int n_python);
/* The id for a hash, without writing a row: *first is 1 when the hash is new (the caller
 * writes its STACK row), 0 when it was seen before or got no id (the return value 0). */
uint32_t xp_stack_table_intern(struct xp_stack_table *t, uint64_t hash, int *first);
/* fork(): the child's stream is new; its stacks get ids (and rows) of their own, from 1. */
void xp_stack_table_reset(struct xp_stack_table *t);
/* The table and its batch freed (init again to reuse it). */
void xp_stack_table_free(struct xp_stack_table *t);

#endif
