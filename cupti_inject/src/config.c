/* See config.h: the product switches, read once. */
#include "config.h"

#include <stdlib.h>
#include <string.h>

struct xp_config xp_config = {.stacks = 1, .python = 1, .kinds = ~0u};

static int env_flag(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    return strcmp(v, "0") != 0;
}

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 10) : dflt;
}

/* XPU_PERF_KINDS: a kind is wanted when its name occurs in the list ("none": no kind). */
static unsigned read_kinds(void) {
    static const struct { const char *name; unsigned bit; } names[] = {
        {"kernel", XP_KIND_KERNEL}, {"memcpy", XP_KIND_MEMCPY}, {"memset", XP_KIND_MEMSET},
        {"sync", XP_KIND_SYNC},     {"marker", XP_KIND_MARKER}, {"memory", XP_KIND_MEMORY},
    };
    const char *v = getenv("XPU_PERF_KINDS");
    if (!v || !*v) return ~0u;
    unsigned kinds = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strstr(v, names[i].name)) kinds |= names[i].bit;
    return kinds;
}

int xp_config_read(void) {
    struct xp_config *c = &xp_config;
    c->enabled = getenv("XPU_PERF_OUT_DIR") != NULL;
    if (!c->enabled) return 0;
    c->stacks = env_flag("XPU_PERF_STACKS", 1);
    c->python = env_flag("XPU_PERF_PYTHON", 1);
    c->kinds = read_kinds();
    c->sync_activity = env_flag("XPU_PERF_SYNC_ACTIVITY", 0);
    const char *program = getenv("XPU_PERF_PROGRAM_PROFILER");
    c->program_profiler_refuse = program && strcmp(program, "refuse") == 0;
    const char *device_mb = getenv("XPU_PERF_DEVICE_BUFFER_MB");
    c->device_buffer_mb = device_mb && atoi(device_mb) > 0 ? (uint64_t)atoi(device_mb) : 0;
    const char *range = getenv("XPU_PERF_CAPTURE_RANGE");
    int ranged = 1;
    if (range && strcmp(range, "cudaProfilerApi") == 0) c->window_mode = WINDOW_PROFILER_API;
    else if (range && strncmp(range, "nvtx:", 5) == 0) c->window_mode = WINDOW_NVTX;
    else if (range && strcmp(range, "signal") == 0) c->window_mode = WINDOW_TREE;
    else if (range && strcmp(range, "torch-profiler") == 0) c->window_mode = WINDOW_PROGRAM_PROFILER;
    else ranged = 0;
    if (ranged) {
        c->window_range = range;
        c->window_limit = env_u64("XPU_PERF_CAPTURE_RANGE_END", 1);
    } else if (getenv("XPU_PERF_WINDOW_DELAY_MS")) {
        c->window_mode = WINDOW_DELAY;
        const char *t0 = getenv("XPU_PERF_WINDOW_T0_NS");
        c->has_t0 = t0 && *t0;
        c->window_t0_ns = env_u64("XPU_PERF_WINDOW_T0_NS", 0);
        c->window_delay_ms = env_u64("XPU_PERF_WINDOW_DELAY_MS", 0);
        c->window_duration_ms = env_u64("XPU_PERF_WINDOW_DURATION_MS", 0);
    }
    return 1;
}
