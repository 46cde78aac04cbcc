/* Checks cupti_inject's CFI unwinder (with its previous-unwind memo) against glibc's
 * backtrace() on launch-like call paths that alternate, diverge at the top, share their outer
 * frames at shifting stack depths (alloca in the driver), and include frames without frame
 * pointers.  Prints "unwinds N frames F mismatches M" and exits 1 on any mismatch. */
#include <alloca.h>
#include <execinfo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unwind.h"

static volatile int sink;
static long unwinds, frames_checked, mismatches;

__attribute__((noinline)) static void check_here(void) {
    uint64_t pcs[128];
    void *bt[128];
    int n = xp_unwind(pcs, 128);
    int m = backtrace(bt, 128);
    unwinds++;
    /* Entry 0 of each is its own call site in this function: compare from the caller on. */
    if (n < 4 || n != m) { mismatches++; return; }
    for (int i = 1; i < n; i++) {
        frames_checked++;
        if (pcs[i] != (uint64_t)(uintptr_t)bt[i]) { mismatches++; return; }
    }
}

#define LEAF(name, pad)                                                              \
    __attribute__((noinline)) static void name(int k) {                            \
        volatile char buf[pad];                                                     \
        buf[0] = (char)k;                                                           \
        check_here();                                                               \
        sink += buf[0];                                                             \
    }
LEAF(launch_a, 24)
LEAF(launch_b, 200)
LEAF(launch_c, 8)

__attribute__((noinline, optimize("omit-frame-pointer"))) static void no_fp(int k) {
    volatile char buf[40];
    buf[0] = (char)k;
    if (k & 1) launch_a(k); else launch_c(k);
    sink += buf[0];
}
__attribute__((noinline)) static void op_linear(int k) { launch_a(k); sink++; }
__attribute__((noinline)) static void op_norm(int k) { launch_b(k); launch_c(k); sink++; }
__attribute__((noinline)) static void op_gelu(int k) { no_fp(k); sink++; }
__attribute__((noinline)) static void nested(int depth, int k) {
    if (depth > 0) nested(depth - 1, k); else op_norm(k);
    sink++;
}

typedef void (*op_fn)(int);
__attribute__((noinline)) static void step(int i) {
    /* Shift the whole outer stack between steps: the shared outer frames move. */
    volatile char *pad = alloca(16 + 16 * (i % 7));
    pad[0] = (char)i;
    static const op_fn ops[] = {op_linear, op_norm, op_gelu};
    ops[i % 3](i);
    nested(i % 5, i);
    sink += pad[0];
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 2000;
    for (int i = 0; i < steps; i++) step(i);
    printf("unwinds %ld frames %ld mismatches %ld\n", unwinds, frames_checked, mismatches);
    return mismatches ? 1 : 0;
}
