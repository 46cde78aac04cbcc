/* Blocked time ("waits"): the preloaded sampler library interposes the blocking libc calls
 * (poll/epoll/select, read/recv, accept/connect, futex-based pthread and semaphore waits,
 * sleeps, the wait family, pthread_join) and records each call of a program thread that lasted at
 * least the threshold: thread, start, duration, call, and the native + Python stack at its
 * entry (taken after the call returned: the caller's frames are the same).  A CPU-time
 * sampler never sees a blocked thread; these records are what it was blocked in.
 *
 *   XPU_PERF_WAIT_THRESHOLD_US  record calls that blocked at least this long (default 100;
 *                               0: record none)
 *
 * A wrapper never changes what the call does or returns: the real call is made once, with
 * the same arguments, its return value returned and its errno restored after the recording;
 * no signal is sent and no call is retried or interrupted.  Calls made by this library's
 * own code (the scanner, the writer, the signal handler's reads) are not waits.
 *
 * Layering: sampler.c starts, drains and forks these (the functions below); waits.c calls
 * only the stream, the stack table, the unwinder, the Python reader, the module map and the
 * window page. */
#ifndef XPU_PERF_WAITS_H
#define XPU_PERF_WAITS_H

#include <setjmp.h>

#include "window_control.h"

/* Start recording (the sampler's stream is open).  python: walk Python frames (the caller
 * keeps a SIGSEGV handler that honours xp_waits_walk_recovery, see below). */
void xp_waits_start(int python, struct xp_window_control *windows);
/* The sampler's fault handler is installed (1) or not (0): Python frames are walked only
 * under it. */
void xp_waits_python_guarded(int on);
/* Move the recorded waits into the stream (the scanner's round, the final flush; the caller
 * serialises these with fork). */
void xp_waits_drain(void);
/* The final counters (waits, waits lost) into the stream. */
void xp_waits_emit_counters(void);
/* fork(): the child's stream is new; its waits start from nothing. */
void xp_waits_fork_child(void);
/* Set while a wait's Python walk runs: the sampler's SIGSEGV/SIGBUS handler jumps here. */
extern __thread sigjmp_buf *xp_waits_walk_recovery;

#endif
