/* The injection library's life after its set-up (lifecycle.c): the flush hook; exit, _exit,
 * exec, signal and fork handling. */
#ifndef XP_LIFECYCLE_H
#define XP_LIFECYCLE_H

/* After the set-up: the flush hook, fork handlers, the signal flush thread, atexit and the
 * sampler library's exit hooks. */
void lifecycle_start(void);
/* At a thread's first traced call: our final flush must run before the driver's teardown. */
void register_late_atexit_once(void);

#endif
