/* The injection library's switches, read from the environment once, at InitializeInjection.
 * Each is in the one table of docs/ARCHITECTURE.md ("Environment switches"); `record` sets
 * most of them (collector/commands/record.py).  Measurement-only switches are not here: they
 * are in experiments.h, compiled in only for the benchmarks. */
#ifndef XP_CONFIG_H
#define XP_CONFIG_H

#include <stdint.h>

/* The activity kinds XPU_PERF_KINDS may name. */
enum xp_kind { XP_KIND_KERNEL = 1, XP_KIND_MEMCPY = 2, XP_KIND_MEMSET = 4, XP_KIND_SYNC = 8,
               XP_KIND_MARKER = 16, XP_KIND_MEMORY = 32 };

/* What opens the windows: cudaProfilerStart/Stop, an NVTX range by name, the target's start +
 * --delay, or `record` (tree_open on the control page: --capture-range signal). */
enum xp_window_mode { WINDOW_NONE, WINDOW_PROFILER_API, WINDOW_DELAY, WINDOW_NVTX, WINDOW_TREE,
                      WINDOW_PROGRAM_PROFILER /* the program's torch.profiler trace */ };

struct xp_config {
    int enabled;              /* XPU_PERF_OUT_DIR set: record this process */
    int stacks;               /* XPU_PERF_STACKS (default 1): launch stacks */
    int python;               /* XPU_PERF_PYTHON (default 1): Python frames in launch stacks */
    unsigned kinds;           /* XPU_PERF_KINDS: enum xp_kind bits (default all) */
    int sync_activity;        /* XPU_PERF_SYNC_ACTIVITY (default 0): sync ops from CUPTI's
                                 SYNCHRONIZATION records, not from the sync calls' callbacks */
    uint64_t device_buffer_mb; /* XPU_PERF_DEVICE_BUFFER_MB (0: CUPTI's default) */
    /* Capture windows (windows.c). */
    enum xp_window_mode window_mode;
    uint64_t window_limit;    /* XPU_PERF_CAPTURE_RANGE_END (default 1, 0: all) */
    const char *window_range; /* XPU_PERF_CAPTURE_RANGE as given (nvtx:NAME: the windows' reason) */
    int has_t0;               /* XPU_PERF_WINDOW_T0_NS given */
    uint64_t window_t0_ns;    /* XPU_PERF_WINDOW_T0_NS: the target's start (CLOCK_MONOTONIC) */
    uint64_t window_delay_ms; /* XPU_PERF_WINDOW_DELAY_MS */
    uint64_t window_duration_ms; /* XPU_PERF_WINDOW_DURATION_MS (0: until the process ends) */
    int program_profiler_refuse; /* XPU_PERF_PROGRAM_PROFILER=refuse: the program's own CUPTI
                                    client is refused, not served (program_profiler.c) */
};

extern struct xp_config xp_config;

/* Fill xp_config from the environment; 0 when this process is not recorded. */
int xp_config_read(void);

static inline int kind_wanted(unsigned kind) { return (xp_config.kinds & kind) != 0; }

#endif
