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
/* Prefetch the stack lines the previous unwind read (default 1; XPU_PERF_UNWIND_PREFETCH). */
extern int xp_unwind_prefetch;

#endif
