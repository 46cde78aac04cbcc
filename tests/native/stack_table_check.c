/* Checks cupti_inject's stack table (stack_table.c) with the real stream: writes
 * <XPU_PERF_OUT_DIR>/check-<pid>.xpstream, whose STACK rows tests/test_stack_table.py reads
 * back.  argv[1]: how many distinct stacks for the many-stacks part.
 *
 * Prints one line per part, "<part> <numbers>", and "ok" at the end; any broken expectation
 * prints "FAIL <what>" and exits 1.
 *
 * Stack k of the many-stacks part (ids 1..n in order) has native pcs
 * {0x400000 + k, 0x500000 + k % 7, 0x600000} and, for odd k, one Python key {0x700000 + k, k};
 * tests/test_stack_table.py rebuilds them from k. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "stack_table.h"
#include "stream.h"

static int failed;
#define EXPECT(cond, ...)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            printf("FAIL ");                                                                 \
            printf(__VA_ARGS__);                                                             \
            printf("\n");                                                                    \
            failed = 1;                                                                      \
        }                                                                                    \
    } while (0)

static int many_stack(uint64_t k, uint64_t *pcs, struct xp_pyframe_key *python, int *n_python) {
    pcs[0] = 0x400000 + k;
    pcs[1] = 0x500000 + k % 7;
    pcs[2] = 0x600000;
    *n_python = (int)(k & 1);
    python[0] = (struct xp_pyframe_key){0x700000 + k, k};
    return 3;
}

/* Many distinct stacks, each seen twice, the second time after all others (the table grew
 * many times in between): the ids stay, one STACK row each. */
static void many(struct xp_stack_table *t, uint32_t n) {
    uint64_t pcs[3];
    struct xp_pyframe_key python[1];
    int n_python;
    for (uint32_t k = 1; k <= n; k++) {
        int n_native = many_stack(k, pcs, python, &n_python);
        uint32_t id = xp_stack_table_id(t, pcs, n_native, python, n_python);
        EXPECT(id == k, "many: stack %u got id %u", k, id);
    }
    uint32_t same = 0;
    for (uint32_t k = n; k >= 1; k--) {
        int n_native = many_stack(k, pcs, python, &n_python);
        same += xp_stack_table_id(t, pcs, n_native, python, n_python) == k;
    }
    EXPECT(same == n, "many: %u of %u stacks kept their id", same, n);
    EXPECT(t->full == 0, "many: %lu not interned", (unsigned long)t->full);
    printf("many %u slots %u\n", n, t->slots);
}

/* Identical content is one stack, whatever buffer it sits in; a stack that differs only in
 * its Python part, or only in its length, is another. */
static void identical(struct xp_stack_table *t) {
    uint64_t a[3] = {0x10, 0x20, 0x30}, b[3] = {0x10, 0x20, 0x30};
    struct xp_pyframe_key pa[1] = {{0x99, 4}}, pb[1] = {{0x99, 5}};
    uint32_t x = xp_stack_table_id(t, a, 3, pa, 1);
    uint32_t y = xp_stack_table_id(t, b, 3, pa, 1);
    uint32_t z = xp_stack_table_id(t, a, 3, pb, 1);
    uint32_t w = xp_stack_table_id(t, a, 2, NULL, 0);
    uint32_t v = xp_stack_table_id(t, a, 3, NULL, 0);
    EXPECT(x && x == y, "identical: %u != %u", x, y);
    EXPECT(z && z != x && w && w != x && w != z && v && v != w && v != x,
           "identical: distinct stacks share ids %u %u %u %u", x, z, w, v);
    printf("identical %u %u %u %u %u\n", x, y, z, w, v);
}

/* Hashes that all start at the same slot, whatever the table's size (bits 20 and up are the
 * same up to bit 44), and 0 (the empty-slot mark): each its own id, found again after the
 * table grew; a hash seen before is not "first". */
static void collisions(void) {
    struct xp_stack_table t;
    EXPECT(xp_stack_table_init(&t, 0, 8, 1u << 12) == 0, "collisions: init");
    enum { N = 300 };
    uint32_t ids[N];
    for (uint64_t i = 0; i < N; i++) {
        int first;
        ids[i] = xp_stack_table_intern(&t, (i + 1) << 48 | 5ull << 20, &first);
        EXPECT(ids[i] == i + 1 && first, "collisions: hash %lu got id %u", (unsigned long)i, ids[i]);
    }
    int kept = 0;
    for (uint64_t i = 0; i < N; i++) {
        int first;
        kept += xp_stack_table_intern(&t, (i + 1) << 48 | 5ull << 20, &first) == ids[i] && !first;
    }
    EXPECT(kept == N, "collisions: %d of %d kept their id", kept, N);
    int first_zero, first_one;
    uint32_t zero = xp_stack_table_intern(&t, 0, &first_zero);
    uint32_t one = xp_stack_table_intern(&t, 1, &first_one);
    EXPECT(zero == N + 1 && first_zero && one == zero && !first_one,
           "collisions: hash 0 -> %u, hash 1 -> %u", zero, one);
    printf("collisions %d slots %u\n", kept, t.slots);
    xp_stack_table_free(&t);
}

/* A table bounded at 64 slots takes 32 stacks; each later new stack gets 0 and is counted,
 * the 32 keep their ids, and no STACK row is written for a stack without an id. */
static void full(void) {
    struct xp_stack_table t;
    EXPECT(xp_stack_table_init(&t, 0x40000000u, 16, 64) == 0, "full: init");
    uint64_t pcs[1];
    uint32_t got = 0, refused = 0;
    for (uint64_t k = 0; k < 50; k++) {
        pcs[0] = 0x900000 + k;
        uint32_t id = xp_stack_table_id(&t, pcs, 1, NULL, 0);
        if (id) {
            got++;
            EXPECT(id == (0x40000000u | (uint32_t)(k + 1)), "full: stack %lu got id %x",
                   (unsigned long)k, id);
        } else {
            refused++;
        }
    }
    uint32_t kept = 0;
    for (uint64_t k = 0; k < 50; k++) {
        pcs[0] = 0x900000 + k;
        uint32_t id = xp_stack_table_id(&t, pcs, 1, NULL, 0);
        kept += k < 32 ? id == (0x40000000u | (uint32_t)(k + 1)) : id == 0;
    }
    EXPECT(got == 32 && refused == 18, "full: %u interned, %u refused", got, refused);
    EXPECT(kept == 50, "full: %u of 50 answered as before", kept);
    EXPECT(t.full == 36, "full: %lu counted, 36 expected", (unsigned long)t.full);
    printf("full %u %lu\n", got, (unsigned long)t.full);
    /* fork(): ids start again from 1, the count from 0. */
    xp_stack_table_reset(&t);
    pcs[0] = 0x900000 + 40;
    uint32_t again = xp_stack_table_id(&t, pcs, 1, NULL, 0);
    EXPECT(again == (0x40000000u | 1u) && t.full == 0, "reset: id %x, full %lu", again,
           (unsigned long)t.full);
    xp_stack_table_free(&t);
}

int main(int argc, char **argv) {
    uint32_t n = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 100000;
    xp_stream_prefix = "check";
    if (xp_stream_start() != 0) {
        printf("FAIL the stream did not start (XPU_PERF_OUT_DIR?)\n");
        return 1;
    }
    struct xp_stack_table t;
    EXPECT(xp_stack_table_init(&t, 0, 1u << 4, XP_STACK_TABLE_MAX_SLOTS) == 0, "init");
    many(&t, n);
    identical(&t);
    collisions();
    full();
    xp_stream_flush(XP_FLUSH_FINAL);
    xp_stack_table_free(&t);
    printf(failed ? "failed\n" : "ok\n");
    return failed;
}
