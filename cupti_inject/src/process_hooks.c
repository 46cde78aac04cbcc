/* Process-wide interpositions of the preloaded sampler library: see process_hooks.h. */
#define _GNU_SOURCE
#include "process_hooks.h"

#include <dlfcn.h>
#include <errno.h>
#include <grp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "stream.h"

#define MAX_FLUSHES 4
static void (*flushes[MAX_FLUSHES])(int how);
static atomic_int n_flushes;
static pthread_mutex_t register_lock = PTHREAD_MUTEX_INITIALIZER;
/* The process that ran the final flushes (a fork's child starts over; a vfork()ed child,
 * which shares this memory, runs them too, and each stream refuses a process not its own). */
static _Atomic pid_t flushed_pid;

void xpu_perf_on_exit(void (*flush)(int how)) {
    pthread_mutex_lock(&register_lock);
    int n = atomic_load(&n_flushes);
    int known = 0;
    for (int i = 0; i < n; i++) known |= flushes[i] == flush;
    if (!known && n < MAX_FLUSHES) {
        flushes[n] = flush;
        atomic_store(&n_flushes, n + 1);
    }
    pthread_mutex_unlock(&register_lock);
}

static void final_flushes(int how) {
    pid_t self = getpid();
    if (atomic_exchange(&flushed_pid, self) == self) return;
    int saved_errno = errno;
    for (int i = atomic_load(&n_flushes) - 1; i >= 0; i--) flushes[i](how);
    errno = saved_errno;
}

/* exit() runs atexit (our flush) and then glibc's own _exit, which is not this one. */
XP_EXPORT void _exit(int status) {
    final_flushes(XP_FLUSH_FINAL);
    for (;;) syscall(SYS_exit_group, status);
}

XP_EXPORT void _Exit(int status) {
    final_flushes(XP_FLUSH_FINAL);
    for (;;) syscall(SYS_exit_group, status);
}

/* Will `sig`, sent to this process now, end it without running any code of its own?  Only
 * the terminating signals a program sends itself to stop; SIGKILL stays a kill (nothing may
 * run first) and SIGABRT/SIGSEGV a crash. */
static int ends_process(int sig) {
    switch (sig) {
    case SIGHUP: case SIGINT: case SIGQUIT: case SIGTERM: case SIGUSR1: case SIGUSR2:
    case SIGALRM:
        break;
    default:
        return 0;
    }
    struct sigaction action;
    if (sigaction(sig, NULL, &action) != 0) return 0;
    if ((action.sa_flags & SA_SIGINFO) || action.sa_handler != SIG_DFL) return 0;
    sigset_t blocked;
    if (pthread_sigmask(SIG_BLOCK, NULL, &blocked) != 0 || sigismember(&blocked, sig)) return 0;
    return 1;
}

XP_EXPORT int kill(pid_t pid, int sig) {
    if ((pid == 0 || pid == getpid()) && ends_process(sig)) final_flushes(XP_FLUSH_FINAL);
    return (int)syscall(SYS_kill, pid, sig);
}

XP_EXPORT int raise(int sig) {
    if (ends_process(sig)) final_flushes(XP_FLUSH_FINAL);
    int err = pthread_kill(pthread_self(), sig);
    if (err == 0) return 0;
    errno = err;
    return -1;
}

/* exec replaces the image and its unwritten data: the final flush first (the new image
 * writes a stream of its own); a stream of no events (a forked child that execs at once)
 * is removed instead.  If the exec fails, the rest of this image is not recorded. */
#define XP_EXEC(name, params, args)                                                         \
    XP_EXPORT int name params {                                                             \
        static int (*real) params;                                                          \
        if (!real) real = (int (*) params)dlsym(RTLD_NEXT, #name);                          \
        if (!real) {                                                                        \
            errno = ENOSYS;                                                                 \
            return -1;                                                                      \
        }                                                                                   \
        final_flushes(XP_FLUSH_EXEC);                                                       \
        return real args;                                                                   \
    }

XP_EXEC(execve, (const char *path, char *const argv[], char *const envp[]), (path, argv, envp))
XP_EXEC(execv, (const char *path, char *const argv[]), (path, argv))
XP_EXEC(execvp, (const char *file, char *const argv[]), (file, argv))
XP_EXEC(execvpe, (const char *file, char *const argv[], char *const envp[]), (file, argv, envp))
XP_EXEC(fexecve, (int fd, char *const argv[], char *const envp[]), (fd, argv, envp))

/* ---- changes of user ---- */

/* While still root: dir/uid-N for the user the process becomes, owned by it (0700), in
 * each stream directory of the run; record leaves those traversable (0711) as root. */
static void prepare_user_dirs(uid_t uid) {
    if (uid == (uid_t)-1 || uid == 0 || geteuid() != 0) return;
    static const char *const envs[] = {"XPU_PERF_CPU_OUT_DIR", "XPU_PERF_OUT_DIR"};
    for (int i = 0; i < 2; i++) {
        const char *dir = getenv(envs[i]);
        if (!dir || !*dir) continue;
        char path[4096];
        xp_stream_user_dir(path, sizeof path, dir, (unsigned)uid);
        if (mkdir(path, 0700) != 0 && errno != EEXIST) continue;
        struct stat st;
        /* Only one we made (root's): never hand over what someone else put there. */
        if (lstat(path, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == 0 &&
            chown(path, uid, (gid_t)-1) != 0) {
            continue;
        }
    }
}

static int (*user_change_pause)(void);
static void (*user_change_resume)(int paused);

void xp_on_user_change(int (*pause)(void), void (*resume)(int paused)) {
    user_change_pause = pause;
    user_change_resume = resume;
}

#define XP_SET_ID(name, params, args, new_uid)                                              \
    XP_EXPORT int name params {                                                             \
        static int (*real) params;                                                          \
        if (!real) real = (int (*) params)dlsym(RTLD_NEXT, #name);                          \
        if (!real) {                                                                        \
            errno = ENOSYS;                                                                 \
            return -1;                                                                      \
        }                                                                                   \
        prepare_user_dirs(new_uid);                                                         \
        int paused = user_change_pause ? user_change_pause() : 0;                           \
        int result = real args;                                                             \
        int saved_errno = errno;                                                            \
        if (user_change_resume) user_change_resume(paused);                                 \
        errno = saved_errno;                                                                \
        return result;                                                                      \
    }

XP_SET_ID(setuid, (uid_t uid), (uid), uid)
XP_SET_ID(seteuid, (uid_t euid), (euid), euid)
XP_SET_ID(setreuid, (uid_t ruid, uid_t euid), (ruid, euid), euid)
XP_SET_ID(setresuid, (uid_t ruid, uid_t euid, uid_t suid), (ruid, euid, suid), euid)
XP_SET_ID(setgid, (gid_t gid), (gid), (uid_t)-1)
XP_SET_ID(setegid, (gid_t egid), (egid), (uid_t)-1)
XP_SET_ID(setregid, (gid_t rgid, gid_t egid), (rgid, egid), (uid_t)-1)
XP_SET_ID(setresgid, (gid_t rgid, gid_t egid, gid_t sgid), (rgid, egid, sgid), (uid_t)-1)
XP_SET_ID(setgroups, (size_t size, const gid_t *list), (size, list), (uid_t)-1)
