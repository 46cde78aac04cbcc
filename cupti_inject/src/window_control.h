/* The capture-window state one recording shares: a small file that `record` creates and
 * names in XPU_PERF_WINDOW_CONTROL, mapped by every process of the tree (both libraries).
 *   tree_open        record: 1 while a window of the whole tree is open (an outside toggle,
 *                    --capture-range signal; --delay/--duration)
 *   tree_changes     record: bumped at each change of tree_open (a toggle is never missed
 *                    between two polls)
 *   process_windows  the injection libraries: windows open in processes (cudaProfilerApi,
 *                    NVTX, delay), +1 at an opening, -1 at a close
 * The CPU sampler samples while any window is open: tree_open or process_windows > 0.
 * Layout (little-endian, 4-byte fields) is fixed: collector/window_control.py
 * writes the same offsets. */
#ifndef XP_WINDOW_CONTROL_H
#define XP_WINDOW_CONTROL_H

#include <stdatomic.h>
#include <stdint.h>

#define XP_WINDOW_CONTROL_MAGIC 0x43575058u /* "XPWC" */
#define XP_WINDOW_CONTROL_VERSION 1u

struct xp_window_control {
    uint32_t magic;
    uint32_t version;
    _Atomic uint32_t tree_open;
    _Atomic uint32_t tree_changes;
    _Atomic int32_t process_windows;
};

/* The recording's control page, mapped on first use; NULL without a window mode (no
 * XPU_PERF_WINDOW_CONTROL) or when the file is not one (then windows are per process only). */
struct xp_window_control *xp_window_control(void);

/* Is any window of the recording open (1 without a control page: no window mode)? */
static inline int xp_window_any_open(const struct xp_window_control *c) {
    if (!c) return 1;
    return atomic_load_explicit(&c->tree_open, memory_order_relaxed) ||
           atomic_load_explicit(&c->process_windows, memory_order_relaxed) > 0;
}

#endif
