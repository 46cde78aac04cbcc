/* The injection library's shared state, at the bottom of the files that use it (owner:
 * state.c): the process's counts, written as COUNTER rows at the final flush (counters.c), and
 * whether CUPTI may still be called in this process.  Plus the macros the CUPTI files share.
 * Each file's own entry points are in its own header (docs/ARCHITECTURE.md, `cupti_inject/`
 * under "Modules", has the files from the bottom up). */
#ifndef XP_STATE_H
#define XP_STATE_H

#include <cupti.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#define EXPORT __attribute__((visibility("default")))
#define NO_ID 0xffffffffu

#define CHECK(call)                                                                          \
    do {                                                                                     \
        CUptiResult r_ = (call);                                                             \
        if (r_ != CUPTI_SUCCESS) {                                                           \
            const char *s_ = NULL;                                                           \
            cuptiGetResultString(r_, &s_);                                                   \
            fprintf(stderr, "xpu-perf: %s failed: %s\n", #call, s_ ? s_ : "?");             \
        }                                                                                    \
    } while (0)

struct xp_counters {
    _Atomic uint64_t api_records, launches, launch_stacks, launches_no_stack, alias_records;
    _Atomic uint64_t stacks_unique, stack_table_full, cupti_dropped, activity_buffers;
    _Atomic uint64_t records_kernel, records_memcpy, records_memset, records_sync, records_marker;
    _Atomic uint64_t records_other, records_memory, records_program_only;
    _Atomic uint64_t windows_recorded, windows_ignored;
    _Atomic uint64_t subscribe_refused; /* CUPTI had a subscriber before ours: no API calls */
};
extern struct xp_counters counters;
/* A forked child counts from zero (the windows' counts are reset with the windows). */
void counters_reset(void);

/* Set in a forked child of a process where CUPTI was set up: CUDA cannot be used in such a
 * child, and a call into CUPTI there can block for ever on a lock that one of the parent's
 * CUPTI threads held at the fork (DataLoader workers, compile workers ending through _exit
 * hung in their final flush until their parent killed them).  The child's stream still
 * carries its API rows and counters. */
extern _Atomic int cupti_forked;

#endif
