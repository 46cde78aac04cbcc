/* Loaded-module map for symbolizing launch stacks after the process is gone. */
#ifndef XPU_PERF_MODULES_H
#define XPU_PERF_MODULES_H

/* Emit MODULE chunks when the set of loaded objects changed since the last call. */
void xp_modules_emit_if_changed(void);
void xp_modules_reset(void);
/* [lo, hi) of this library's own code, so stacks can start at its caller. */
void xp_modules_self_range(const void *addr_in_self, unsigned long *lo, unsigned long *hi);

#endif
