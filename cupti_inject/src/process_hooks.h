/* What the preloaded CPU sampler library (libxpu_perf_sampler.so) interposes for the whole
 * process, so that neither library loses its channel's end nor breaks the target:
 *   _exit, _Exit          the final flush of both libraries first (forked workers, os._exit)
 *   kill, raise           the same when the process sends itself a signal that ends it by
 *                         default (Python re-raises SIGINT that way after finalization)
 *   execve, execv, execvp, execvpe, fexecve
 *                         the same before the image is replaced (setpriv, shells, launchers)
 *   set*uid, set*gid, setgroups
 *                         our threads stop around the change (glibc runs the call on every
 *                         thread and aborts when ours, which lack the caller's kept
 *                         capabilities, fail: setpriv); while still root, the new user's
 *                         stream directory dir/uid-N is made for it (stream.c opens there when
 *                         the run's directory refuses it).
 * (The CUPTI entry points a profiler of the program calls are interposed by the same library,
 * in cupti_interpose.c: cupti_interpose.h.) */
#ifndef XP_PROCESS_HOOKS_H
#define XP_PROCESS_HOOKS_H

#define XP_EXPORT __attribute__((visibility("default")))

/* Register a final flush (each library's xp_stream_flush), run (last registered first, once
 * per process) with XP_FLUSH_FINAL when the process ends through _exit/_Exit or a signal it
 * sends itself, XP_FLUSH_EXEC before an exec.  Exported under this name: the CUPTI injection
 * library, which libcuda loads RTLD_LOCAL, finds it with dlsym(RTLD_DEFAULT). */
XP_EXPORT void xpu_perf_on_exit(void (*flush)(int how));

/* What stops and restarts the library's threads around a change of user: sampler.c hands
 * its own at load (pause returns what it stopped, for resume); none: nothing to stop. */
void xp_on_user_change(int (*pause)(void), void (*resume)(int paused));

#endif
