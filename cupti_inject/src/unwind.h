/* Native stack unwinding for launch stacks: DWARF CFI (.eh_frame_hdr/.eh_frame) interpreted
 * once per return address and cached per thread.  A steady-state unwind takes most frames'
 * rules from the thread's previous unwind (read in order) and the rest from a hashed rule
 * cache; glibc backtrace() re-interprets the CFI on every call. */
#ifndef XPU_PERF_UNWIND_H
#define XPU_PERF_UNWIND_H

#include <stdint.h>

/* Writes up to `max` return addresses, innermost first, starting at the caller of
 * xp_unwind_skip_self frames inside this library.  Returns the count. */
int xp_unwind(uint64_t *pcs, int max);
/* Counters for the stream (per process). */
extern uint64_t xp_unwind_cfi_misses;
extern uint64_t xp_unwind_fp_fallbacks;

/* The CPU sampler's walk, from the registers a signal interrupted (async-signal-safe: no
 * locks, no allocation; _dl_find_object is async-signal-safe).  pcs[0] is the interrupted
 * pc itself, later entries are return addresses.  Reads only [regs->rsp, stack_hi). */
struct xp_regs { uint64_t rip, rsp, rbp; };
#define XP_RULE_CACHE_BITS 12
struct xp_rule_slot { uint64_t pc; uint64_t rule; };
/* Per-thread rule cache of the sampler (the launch path keeps its own). */
struct xp_rule_cache {
    struct xp_rule_slot slot[1u << XP_RULE_CACHE_BITS];
    uint64_t misses, fp_steps;
};
/* Why a walk stopped: at the root (CFI says no caller: _start, clone), or early. */
enum xp_unwind_end {
    XP_END_ROOT = 0,       /* complete */
    XP_END_NO_CFI = 1,     /* a pc without CFI whose frame-pointer chain did not hold */
    XP_END_BAD_STACK = 2,  /* a rule pointed outside the thread's stack */
    XP_END_BAD_PC = 3,     /* a return address that is no code address */
    XP_END_MAX_DEPTH = 4,  /* deeper than the buffer */
    XP_END_NO_STACK = 5,   /* the thread's stack bounds are unknown */
    XP_END_COUNT = 6
};
int xp_unwind_regs(const struct xp_regs *regs, uint64_t stack_hi, struct xp_rule_cache *cache,
                   uint64_t *pcs, int max, enum xp_unwind_end *end);
/* The mapping [lo, hi) that holds sp (a thread's stack), from /proc/self/maps with plain
 * system calls (async-signal-safe).  0, or -1 where no mapping holds it. */
int xp_stack_bounds(uint64_t sp, uint64_t *lo, uint64_t *hi);

#endif
