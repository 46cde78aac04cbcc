/* The process's counts (records by kind, drops, launches with and without a stack, windows,
 * unwinder and Python-reader failures), written as COUNTER rows at the final flush: `record`
 * prints them and puts them into the trace's metadata.  A stream without them is one whose
 * process ended without that flush. */
#include "counters.h"
#include "config.h"
#include "nvtx_window.h"
#include "program_profiler.h"
#include "pyframes.h"
#include "state.h"
#include "stream.h"
#include "threads.h"
#include "unwind.h"

void emit_counters(void) {
    uint64_t api = counters.api_records, launch = counters.launches;
    uint64_t with_stack = counters.launch_stacks, no_stack = counters.launches_no_stack;
    uint64_t alias = counters.alias_records;
    pthread_mutex_lock(&threads_lock);
    for (struct thread_state *ts = threads; ts; ts = ts->next) {
        api += ts->n_api;
        launch += ts->n_launch;
        with_stack += ts->n_launch_stack;
        no_stack += ts->n_launch_no_stack;
        alias += ts->n_alias;
    }
    pthread_mutex_unlock(&threads_lock);
    xp_emit_counter("api_records", api);
    xp_emit_counter("launches", launch);
    xp_emit_counter("launches_with_stack", with_stack);
    xp_emit_counter("launches_without_stack", no_stack);
    xp_emit_counter("api_alias_records", alias);
    xp_emit_counter("stacks_unique", counters.stacks_unique);
    xp_emit_counter("stack_table_full", counters.stack_table_full);
    xp_emit_counter("cupti_dropped_records", counters.cupti_dropped);
    xp_emit_counter("activity_buffers", counters.activity_buffers);
    xp_emit_counter("records_kernel", counters.records_kernel);
    xp_emit_counter("records_memcpy", counters.records_memcpy);
    xp_emit_counter("records_memset", counters.records_memset);
    xp_emit_counter("records_sync", counters.records_sync);
    xp_emit_counter("records_marker", counters.records_marker);
    xp_emit_counter("records_other", counters.records_other);
    xp_emit_counter("records_memory", counters.records_memory);
    /* Kinds only the program's own CUPTI client enabled, and what it got (program_*.c). */
    xp_emit_counter("records_program_only", counters.records_program_only);
    xp_emit_counter("cupti_subscribe_refused", counters.subscribe_refused);
    emit_program_cupti();
    xp_emit_counter("windows", counters.windows_recorded);
    xp_emit_counter("windows_ignored", counters.windows_ignored);
    /* NVTX ranges the capture-range matching could not follow (nvtx_window.c). */
    xp_emit_counter("nvtx_ranges_untracked", xp_nvtx_window_untracked());
    xp_emit_counter("unwind_cfi_misses", xp_unwind_cfi_misses);
    xp_emit_counter("unwind_fp_fallbacks", xp_unwind_fp_fallbacks);
    xp_emit_counter("python_guard_failures", xp_py_guard_failures);
    xp_emit_counter("python_frames_enabled", (uint64_t)(xp_config.python && xp_py_enabled));
    /* Python frames wanted, CPython found, but not a layout this library reads: 3.x's x. */
    xp_emit_counter("python_unsupported_minor",
                    xp_config.python && xp_py_minor && !xp_py_enabled ? xp_py_minor : 0);
}
