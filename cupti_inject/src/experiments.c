/* See experiments.h: the measurement-only switches, built only into the benchmarks' library
 * (XPU_PERF_EXPERIMENTS); collector/inject_build.py leaves this file out of product builds. */
#ifndef XPU_PERF_EXPERIMENTS
#error "experiments.c is built only with -DXPU_PERF_EXPERIMENTS"
#endif
#define _GNU_SOURCE
#include "experiments.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "state.h"
#include "stream.h"

struct xp_experiments xp_exp = {.callbacks = 1, .parse = 1};

static int env_flag(const char *name, int dflt) {
    const char *v = getenv(name);
    if (!v || !*v) return dflt;
    return strcmp(v, "0") != 0;
}

static struct xp_selftime exited_st; /* threads that ended (under threads.c's threads_lock) */
static uint64_t selftime_tsc0, selftime_ns0;

void xp_experiments_read(void) {
    xp_exp.callbacks = env_flag("XPU_PERF_CALLBACKS", 1);
    xp_exp.parse = env_flag("XPU_PERF_PARSE", 1);
    xp_exp.callback_noop = env_flag("XPU_PERF_CALLBACK_NOOP", 0);
    xp_exp.selftime = env_flag("XPU_PERF_SELFTIME", 0);
    xp_exp.hw_trace = env_flag("XPU_PERF_HW_TRACE", 0);
    selftime_tsc0 = __rdtsc();
    selftime_ns0 = xp_now_ns();
}

void xp_experiments_enable_hw_trace(void) {
    if (!xp_exp.hw_trace) return;
    /* Hardware-event tracing of kernels/copies where the GPU supports it (looked up, not
     * linked, so an older CUPTI without it still loads this library). */
    CUptiResult (*hw)(uint8_t) = (CUptiResult(*)(uint8_t))dlsym(RTLD_DEFAULT, "cuptiActivityEnableHWTrace");
    if (hw) CHECK(hw(1));
}

void xp_selftime_add(struct xp_selftime *into, const struct xp_selftime *from) {
    const uint64_t *f = (const uint64_t *)from;
    uint64_t *t = (uint64_t *)into;
    for (size_t i = 0; i < sizeof *from / sizeof(uint64_t); i++) t[i] += f[i];
}

void xp_selftime_thread_exit(const struct xp_selftime *st) { xp_selftime_add(&exited_st, st); }

void xp_selftime_fork_child(void) { memset(&exited_st, 0, sizeof exited_st); }

/* One line on stderr: where the library's own callback time goes, per outermost API call. */
void xp_selftime_report(const struct xp_selftime *live) {
    if (!xp_exp.selftime) return;
    struct xp_selftime t = {0};
    xp_selftime_add(&t, &exited_st);
    xp_selftime_add(&t, live);
    uint64_t dtsc = __rdtsc() - selftime_tsc0, dns = xp_now_ns() - selftime_ns0;
    double ns_per_cycle = dtsc ? (double)dns / (double)dtsc : 0;
    double per = t.outer_enters ? ns_per_cycle / (double)t.outer_enters : 0;
    fprintf(stderr,
            "xpu-perf selftime pid %d: %llu callbacks, %llu outer API calls; ns per outer call: "
            "callbacks %.0f = outer enter %.0f (stack %.0f: unwind %.0f, python %.0f, dedupe %.0f) "
            "+ nested calls %.0f + outer exit %.0f; "
            "frames per call: native %.1f, python %.1f\n",
            (int)getpid(), (unsigned long long)t.callbacks, (unsigned long long)t.outer_enters,
            per * (double)t.cyc_callback,
            per * (double)(t.cyc_callback - t.cyc_nested - t.cyc_exit), per * (double)t.cyc_stack,
            per * (double)t.cyc_unwind, per * (double)t.cyc_python,
            per * (double)(t.cyc_stack - t.cyc_unwind - t.cyc_python),
            per * (double)t.cyc_nested, per * (double)t.cyc_exit,
            t.outer_enters ? (double)t.native_frames / (double)t.outer_enters : 0,
            t.outer_enters ? (double)t.python_frames / (double)t.outer_enters : 0);
}
