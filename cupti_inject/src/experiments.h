/* Measurement-only switches, for bench/gpu_overhead.py: compiled in only when the library is
 * built with XPU_PERF_EXPERIMENTS defined (`python3 -m collector.inject_build --experiments`).
 * A product build reads none of them: `xp_exp` is then a constant with every experiment off,
 * and the code behind each one folds away.  Most of them break the trace.
 *   XPU_PERF_CALLBACKS=0      no API callbacks (CUPTI activity alone)
 *   XPU_PERF_PARSE=0          activity buffers freed unread
 *   XPU_PERF_CALLBACK_NOOP=1  subscribed callbacks return at once (CUPTI's dispatch alone)
 *   XPU_PERF_SELFTIME=1       TSC time in the library's API callbacks, by part, on stderr at exit
 *   XPU_PERF_HW_TRACE=1       cuptiActivityEnableHWTrace where the GPU supports it
 * Removed switches and where their answers are: docs/benchmarks.md ("Removed switches"). */
#ifndef XP_EXPERIMENTS_H
#define XP_EXPERIMENTS_H

#include <stdint.h>

struct xp_experiments {
    int callbacks, parse, callback_noop, selftime, hw_trace;
};

/* XPU_PERF_SELFTIME: TSC cycles spent in each part of the callbacks, and what they did. */
struct xp_selftime {
    uint64_t callbacks, outer_enters, native_frames, python_frames;
    uint64_t cyc_callback, cyc_stack, cyc_unwind, cyc_python, cyc_nested, cyc_exit;
};

#ifdef XPU_PERF_EXPERIMENTS
#include <x86intrin.h>

extern struct xp_experiments xp_exp;
/* Read the switches above (InitializeInjection, before anything else). */
void xp_experiments_read(void);
/* XPU_PERF_HW_TRACE: before the activity kinds are enabled. */
void xp_experiments_enable_hw_trace(void);
/* XPU_PERF_SELFTIME: a thread's parts, kept when it ends (caller holds threads_lock); one
 * thread's parts added to another's; the line at the final flush from the live threads'
 * parts (threads.c's threads_selftime_report, under threads_lock) and the ended ones'. */
void xp_selftime_thread_exit(const struct xp_selftime *st);
void xp_selftime_add(struct xp_selftime *into, const struct xp_selftime *from);
void xp_selftime_report(const struct xp_selftime *live);
void xp_selftime_fork_child(void);

static inline uint64_t xp_cycles(void) { return xp_exp.selftime ? __rdtsc() : 0; }
/* The cycles since c_in go to the callbacks' total and to `part` (may be NULL). */
static inline void xp_selftime_charge(struct xp_selftime *st, uint64_t c_in, uint64_t *part) {
    if (!xp_exp.selftime) return;
    uint64_t c = xp_cycles() - c_in;
    st->cyc_callback += c;
    if (part) *part += c;
}
/* A statement that runs only under XPU_PERF_SELFTIME (it may name a thread's `st`). */
#define XP_SELFTIME(stmt)              \
    do {                               \
        if (xp_exp.selftime) { stmt; } \
    } while (0)
#define XP_CHARGE(ts, c_in, part) xp_selftime_charge(&(ts)->st, (c_in), (part))
#else
static const struct xp_experiments xp_exp = {.callbacks = 1, .parse = 1};
static inline void xp_experiments_read(void) {}
static inline void xp_experiments_enable_hw_trace(void) {}
static inline void xp_selftime_fork_child(void) {}
static inline uint64_t xp_cycles(void) { return 0; }
#define XP_SELFTIME(stmt) \
    do {                  \
    } while (0)
#define XP_CHARGE(ts, c_in, part) ((void)(c_in))
#endif

#endif
