/* See waits.h.  Each wrapper reads the clock before and after the real call; only a call that
 * lasted the threshold costs more (the stack walk and a ring slot), and that cost lands after
 * the call returned, on a thread that was blocked anyway.
 *
 * Per thread: a record block mmap'ed at the thread's first recorded wait (rule and line
 * caches, a ring of slots written by that thread only and read by the sampler's scanner),
 * found through one initial-exec TLS pointer.  A thread that exits gives its block back
 * (pthread key destructor); the scanner drains it and hands it to the next new thread.
 *
 * Async-signal-safety: a wrapper may run inside a signal handler (the target's, or the
 * sampler's own reads of /proc/self/maps): the recording path takes no lock and allocates
 * only with mmap; a wrapper entered while its thread is recording (a handler that interrupted
 * the recording) calls through without recording.  The Python walk runs under the sampler's
 * fault recovery (xp_waits_walk_recovery), as the sampler's own walk does. */
#define _GNU_SOURCE
#include "waits.h"

#include <dlfcn.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "modules.h"
#include "process_hooks.h"
#include "pyframes.h"
#include "stack_table.h"
#include "stream.h"
#include "strings.h"
#include "unwind.h"
#include "window_control.h"

#define WAIT_SLOTS 128 /* 128 waits of >= 100 us: >= 12.8 ms of one thread's blocking per 20 ms scan */
#define WAIT_NATIVE 128
#define WAIT_PYTHON 128
#define DEFAULT_THRESHOLD_US 100

/* The calls, in the order of their names (what WAIT.call_id names, interned). */
enum wait_call {
    W_POLL, W_PPOLL, W_EPOLL_WAIT, W_EPOLL_PWAIT, W_SELECT, W_PSELECT, W_READ, W_RECV,
    W_RECVFROM, W_RECVMSG, W_ACCEPT, W_ACCEPT4, W_CONNECT, W_COND_WAIT, W_COND_TIMEDWAIT,
    W_COND_CLOCKWAIT, W_MUTEX_LOCK, W_MUTEX_TIMEDLOCK, W_SEM_WAIT, W_SEM_TIMEDWAIT,
    W_SEM_CLOCKWAIT, W_NANOSLEEP, W_CLOCK_NANOSLEEP, W_USLEEP, W_SLEEP, W_WAIT, W_WAITPID,
    W_WAITID, W_WAIT4, W_JOIN, W_RWLOCK_RDLOCK, W_RWLOCK_WRLOCK, W_CALLS
};
static const char *const call_names[W_CALLS] = {
    "poll", "ppoll", "epoll_wait", "epoll_pwait", "select", "pselect", "read", "recv",
    "recvfrom", "recvmsg", "accept", "accept4", "connect", "pthread_cond_wait",
    "pthread_cond_timedwait", "pthread_cond_clockwait", "pthread_mutex_lock",
    "pthread_mutex_timedlock", "sem_wait", "sem_timedwait", "sem_clockwait", "nanosleep",
    "clock_nanosleep", "usleep", "sleep", "wait", "waitpid", "waitid", "wait4", "pthread_join",
    "pthread_rwlock_rdlock", "pthread_rwlock_wrlock",
};

struct wait_slot {
    uint64_t start, duration;
    uint16_t call, n_native, n_python, unwind_end;
    uint64_t pcs[WAIT_NATIVE];
    struct xp_pyframe_key python[WAIT_PYTHON];
};

enum { BLOCK_FREE = 0, BLOCK_OWNED = 1, BLOCK_EXITED = 2 };

struct wait_thread {
    _Atomic int state;
    pid_t tid;
    struct wait_thread *next; /* every block ever made (never unlinked: reused) */
    uint64_t stack_lo, stack_hi;
    _Atomic uint64_t head, tail;
    _Atomic uint64_t ring_full;
    struct xp_rule_cache rules;
    struct xp_line_cache lines;
    struct wait_slot ring[WAIT_SLOTS];
};

/* The thread's block; EXITED_MARK once its key destructor ran (no recording after it). */
#define EXITED_MARK ((struct wait_thread *)1)
static __thread struct wait_thread *self_block __attribute__((tls_model("initial-exec")));
/* Set while this thread records: a wrapper entered meanwhile (a signal handler) calls
 * through. */
static __thread int recording __attribute__((tls_model("initial-exec")));
__thread sigjmp_buf *xp_waits_walk_recovery __attribute__((tls_model("initial-exec")));

static int waits_on;
static uint64_t threshold_ns = DEFAULT_THRESHOLD_US * 1000ull;
static int walk_python;
static atomic_int python_guarded;
static struct xp_window_control *window_control;
static unsigned long self_lo, self_hi; /* this library's code: its own calls are no waits */
static struct wait_thread *_Atomic blocks;
static pthread_key_t exit_key;
static int exit_key_ok;

static _Atomic uint64_t waits_total, waits_outside_window, waits_no_block, waits_python_faults;
static _Atomic uint64_t record_ns; /* time spent recording (walks, slot) after the calls */
static uint64_t ring_full_total, waits_drained;

/* ---- the recording path (any thread, possibly in a signal handler) ---- */

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void block_exited(void *p) {
    struct wait_thread *w = p;
    self_block = EXITED_MARK;
    atomic_store_explicit(&w->state, BLOCK_EXITED, memory_order_release);
}

/* The thread's block: a free one of a thread that exited, else a new mapping. */
static struct wait_thread *claim_block(void) {
    for (struct wait_thread *w = atomic_load(&blocks); w; w = w->next) {
        int expected = BLOCK_FREE;
        if (atomic_compare_exchange_strong(&w->state, &expected, BLOCK_OWNED)) {
            /* Its line cache named code objects of the exited thread's frames. */
            memset(&w->lines, 0, sizeof w->lines);
            w->stack_lo = w->stack_hi = 0;
            w->tid = (pid_t)syscall(SYS_gettid);
            return w;
        }
    }
    struct wait_thread *w = mmap(NULL, sizeof *w, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (w == MAP_FAILED) return NULL;
    atomic_store(&w->state, BLOCK_OWNED);
    w->tid = (pid_t)syscall(SYS_gettid);
    struct wait_thread *head = atomic_load(&blocks);
    do w->next = head;
    while (!atomic_compare_exchange_weak(&blocks, &head, w));
    return w;
}

static void record_wait(struct wait_thread *w, uint64_t start, uint64_t end, int call,
                        uint64_t leaf, const struct xp_regs *regs) {
    uint64_t head = atomic_load_explicit(&w->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&w->tail, memory_order_acquire);
    if (head - tail >= WAIT_SLOTS) {
        atomic_fetch_add_explicit(&w->ring_full, 1, memory_order_relaxed);
        return;
    }
    struct wait_slot *slot = &w->ring[head % WAIT_SLOTS];
    slot->start = start;
    slot->duration = end - start;
    slot->call = (uint16_t)call;
    if (regs->rsp < w->stack_lo || regs->rsp >= w->stack_hi) {
        /* Once per thread (and again only on another stack: a handler on sigaltstack). */
        if (xp_stack_bounds(regs->rsp, &w->stack_lo, &w->stack_hi) != 0) w->stack_lo = w->stack_hi = 0;
    }
    /* The walk starts in record's caller (this library) and is cut at its first frame
     * outside it; the libc function itself stands first, as the leaf the program called. */
    uint64_t raw[WAIT_NATIVE];
    enum xp_unwind_end end_reason = XP_END_NO_STACK;
    int n = 0;
    if (w->stack_hi > regs->rsp) n = xp_unwind_regs(regs, w->stack_hi, &w->rules, raw, WAIT_NATIVE, &end_reason);
    int first = 0;
    while (first < n && raw[first] >= self_lo && raw[first] < self_hi) first++;
    slot->pcs[0] = leaf;
    int k = 1;
    for (int i = first; i < n && k < WAIT_NATIVE; i++) slot->pcs[k++] = raw[i];
    slot->n_native = (uint16_t)k;
    slot->unwind_end = (uint16_t)end_reason;
    int n_python = 0;
    if (walk_python && xp_py_enabled && atomic_load_explicit(&python_guarded, memory_order_relaxed)) {
        sigjmp_buf recovery;
        if (sigsetjmp(recovery, 0) == 0) {
            xp_waits_walk_recovery = &recovery;
            n_python = xp_py_walk_lines(slot->python, WAIT_PYTHON, &w->lines);
            xp_waits_walk_recovery = NULL;
        } else {
            atomic_fetch_add_explicit(&waits_python_faults, 1, memory_order_relaxed);
            n_python = 0;
        }
    }
    slot->n_python = (uint16_t)n_python;
    atomic_store_explicit(&w->head, head + 1, memory_order_release);
    atomic_fetch_add_explicit(&waits_total, 1, memory_order_relaxed);
}

/* The call returned after `start`: record it if it lasted the threshold.  Never changes
 * errno; noinline: the walk starts from this frame's registers. */
static __attribute__((noinline)) void wait_end(uint64_t start, int call, void *leaf) {
    uint64_t end = now_ns();
    if (end - start < threshold_ns || recording) return;
    int saved_errno = errno;
    recording = 1;
    struct xp_regs regs;
    __asm__ volatile("lea 0(%%rip), %0\n\tmov %%rsp, %1\n\tmov %%rbp, %2"
                     : "=r"(regs.rip), "=r"(regs.rsp), "=r"(regs.rbp));
    struct wait_thread *w = self_block;
    if (w != EXITED_MARK) {
        if (!xp_window_any_open(window_control)) {
            atomic_fetch_add_explicit(&waits_outside_window, 1, memory_order_relaxed);
        } else {
            if (!w) {
                w = claim_block();
                if (w) {
                    self_block = w;
                    if (exit_key_ok) pthread_setspecific(exit_key, w);
                }
            }
            if (w) record_wait(w, start, end, call, (uint64_t)leaf, &regs);
            else atomic_fetch_add_explicit(&waits_no_block, 1, memory_order_relaxed);
        }
    }
    atomic_fetch_add_explicit(&record_ns, now_ns() - end, memory_order_relaxed);
    recording = 0;
    errno = saved_errno;
}

/* 0: not timed (off, this library's own call, or already recording). */
static inline uint64_t wait_begin(const void *caller) {
    if (!waits_on || recording) return 0;
    if ((unsigned long)caller - self_lo < self_hi - self_lo) return 0;
    return now_ns();
}

static void *next_symbol(const char *name) {
    void *p = dlsym(RTLD_NEXT, name);
    if (!p) abort(); /* a libc without it: this program could not have called it either */
    return p;
}

/* _FORTIFY_SOURCE builds call the checked variants where the buffer's size is known at
 * compile time; they reach the plain call inside libc, past this library. */
ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen);
ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                       struct sockaddr *from, socklen_t *fromlen);
int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen);

/* Every call's next definition, looked up at load (below): dlsym is no call for a signal
 * handler, and the sampler's handler reads /proc/self/maps through these wrappers.  A call
 * made before that (another library's constructor) looks its own up. */
#define WRAPPED(X) \
    X(poll) \
    X(ppoll) \
    X(epoll_wait) \
    X(epoll_pwait) \
    X(select) \
    X(pselect) \
    X(read) \
    X(recv) \
    X(recvfrom) \
    X(recvmsg) \
    X(accept) \
    X(accept4) \
    X(connect) \
    X(pthread_cond_wait) \
    X(pthread_cond_timedwait) \
    X(pthread_cond_clockwait) \
    X(pthread_mutex_lock) \
    X(pthread_mutex_trylock) \
    X(pthread_mutex_timedlock) \
    X(pthread_rwlock_rdlock) \
    X(pthread_rwlock_wrlock) \
    X(sem_wait) \
    X(sem_timedwait) \
    X(sem_clockwait) \
    X(nanosleep) \
    X(clock_nanosleep) \
    X(usleep) \
    X(sleep) \
    X(wait) \
    X(waitpid) \
    X(waitid) \
    X(wait4) \
    X(pthread_join) \
    X(__read_chk) \
    X(__recv_chk) \
    X(__recvfrom_chk) \
    X(__poll_chk)
#define DECLARE_REAL(name) static __typeof__(name) *real_##name;
WRAPPED(DECLARE_REAL)

__attribute__((constructor(101))) static void resolve_calls(void) {
    /* A libc without one (sem_clockwait before glibc 2.30) leaves it NULL: its programs
     * cannot call it. */
#define RESOLVE(name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name);
    WRAPPED(RESOLVE)
}

/* A wrapper: the real call once, timed. */
#define REAL(name)                                                                         \
    __typeof__(name) *call_##name = real_##name;                                          \
    if (!call_##name) call_##name = real_##name = next_symbol(#name)

#define TIMED(ret_type, id, name, args)                                                    \
    uint64_t start_ = wait_begin(__builtin_return_address(0));                             \
    ret_type r_ = call_##name args;                                                        \
    if (start_) wait_end(start_, id, (void *)call_##name);                                 \
    return r_

/* ---- the interposed calls ---- */

XP_EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout) {
    REAL(poll);
    TIMED(int, W_POLL, poll, (fds, n, timeout));
}
XP_EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *t, const sigset_t *m) {
    REAL(ppoll);
    TIMED(int, W_PPOLL, ppoll, (fds, n, t, m));
}
XP_EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout) {
    REAL(epoll_wait);
    TIMED(int, W_EPOLL_WAIT, epoll_wait, (epfd, ev, max, timeout));
}
XP_EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *m) {
    REAL(epoll_pwait);
    TIMED(int, W_EPOLL_PWAIT, epoll_pwait, (epfd, ev, max, timeout, m));
}
XP_EXPORT int select(int n, fd_set *r, fd_set *w, fd_set *e, struct timeval *t) {
    REAL(select);
    TIMED(int, W_SELECT, select, (n, r, w, e, t));
}
XP_EXPORT int pselect(int n, fd_set *r, fd_set *w, fd_set *e, const struct timespec *t,
                      const sigset_t *m) {
    REAL(pselect);
    TIMED(int, W_PSELECT, pselect, (n, r, w, e, t, m));
}
XP_EXPORT ssize_t read(int fd, void *buf, size_t count) {
    REAL(read);
    TIMED(ssize_t, W_READ, read, (fd, buf, count));
}
XP_EXPORT ssize_t recv(int fd, void *buf, size_t len, int flags) {
    REAL(recv);
    TIMED(ssize_t, W_RECV, recv, (fd, buf, len, flags));
}
XP_EXPORT ssize_t recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *from,
                           socklen_t *fromlen) {
    REAL(recvfrom);
    TIMED(ssize_t, W_RECVFROM, recvfrom, (fd, buf, len, flags, from, fromlen));
}
XP_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags) {
    REAL(recvmsg);
    TIMED(ssize_t, W_RECVMSG, recvmsg, (fd, msg, flags));
}
XP_EXPORT int accept(int fd, struct sockaddr *addr, socklen_t *len) {
    REAL(accept);
    TIMED(int, W_ACCEPT, accept, (fd, addr, len));
}
XP_EXPORT int accept4(int fd, struct sockaddr *addr, socklen_t *len, int flags) {
    REAL(accept4);
    TIMED(int, W_ACCEPT4, accept4, (fd, addr, len, flags));
}
XP_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    REAL(connect);
    TIMED(int, W_CONNECT, connect, (fd, addr, len));
}
XP_EXPORT int pthread_cond_wait(pthread_cond_t *c, pthread_mutex_t *m) {
    REAL(pthread_cond_wait);
    TIMED(int, W_COND_WAIT, pthread_cond_wait, (c, m));
}
XP_EXPORT int pthread_cond_timedwait(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *t) {
    REAL(pthread_cond_timedwait);
    TIMED(int, W_COND_TIMEDWAIT, pthread_cond_timedwait, (c, m, t));
}
XP_EXPORT int pthread_cond_clockwait(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clock,
                                     const struct timespec *t) {
    REAL(pthread_cond_clockwait);
    TIMED(int, W_COND_CLOCKWAIT, pthread_cond_clockwait, (c, m, clock, t));
}
/* A lock is a wait only when it is taken: the uncontended lock (almost every call, on hot
 * paths of C++ programs) costs one trylock and no clock.  trylock gives what lock gives on
 * every mutex that is free (recursive relock, a robust mutex's EOWNERDEAD included); on one
 * that is not, the real lock is called as before. */
XP_EXPORT int pthread_mutex_lock(pthread_mutex_t *m) {
    REAL(pthread_mutex_lock);
    if (waits_on && !recording) {
        REAL(pthread_mutex_trylock);
        int saved_errno = errno;
        int r = call_pthread_mutex_trylock(m);
        errno = saved_errno;
        if (r != EBUSY) return r;
    }
    TIMED(int, W_MUTEX_LOCK, pthread_mutex_lock, (m));
}
XP_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *m, const struct timespec *t) {
    REAL(pthread_mutex_timedlock);
    TIMED(int, W_MUTEX_TIMEDLOCK, pthread_mutex_timedlock, (m, t));
}
XP_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *l) {
    REAL(pthread_rwlock_rdlock);
    TIMED(int, W_RWLOCK_RDLOCK, pthread_rwlock_rdlock, (l));
}
XP_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *l) {
    REAL(pthread_rwlock_wrlock);
    TIMED(int, W_RWLOCK_WRLOCK, pthread_rwlock_wrlock, (l));
}
XP_EXPORT int sem_wait(sem_t *s) {
    REAL(sem_wait);
    TIMED(int, W_SEM_WAIT, sem_wait, (s));
}
XP_EXPORT int sem_timedwait(sem_t *s, const struct timespec *t) {
    REAL(sem_timedwait);
    TIMED(int, W_SEM_TIMEDWAIT, sem_timedwait, (s, t));
}
XP_EXPORT int sem_clockwait(sem_t *s, clockid_t clock, const struct timespec *t) {
    REAL(sem_clockwait);
    TIMED(int, W_SEM_CLOCKWAIT, sem_clockwait, (s, clock, t));
}
XP_EXPORT int nanosleep(const struct timespec *req, struct timespec *rem) {
    REAL(nanosleep);
    TIMED(int, W_NANOSLEEP, nanosleep, (req, rem));
}
XP_EXPORT int clock_nanosleep(clockid_t clock, int flags, const struct timespec *req,
                              struct timespec *rem) {
    REAL(clock_nanosleep);
    TIMED(int, W_CLOCK_NANOSLEEP, clock_nanosleep, (clock, flags, req, rem));
}
XP_EXPORT int usleep(useconds_t us) {
    REAL(usleep);
    TIMED(int, W_USLEEP, usleep, (us));
}
XP_EXPORT unsigned int sleep(unsigned int seconds) {
    REAL(sleep);
    TIMED(unsigned int, W_SLEEP, sleep, (seconds));
}
XP_EXPORT pid_t wait(int *status) {
    REAL(wait);
    TIMED(pid_t, W_WAIT, wait, (status));
}
XP_EXPORT pid_t waitpid(pid_t pid, int *status, int options) {
    REAL(waitpid);
    TIMED(pid_t, W_WAITPID, waitpid, (pid, status, options));
}
XP_EXPORT int waitid(idtype_t type, id_t id, siginfo_t *info, int options) {
    REAL(waitid);
    TIMED(int, W_WAITID, waitid, (type, id, info, options));
}
XP_EXPORT pid_t wait4(pid_t pid, int *status, int options, struct rusage *usage) {
    REAL(wait4);
    TIMED(pid_t, W_WAIT4, wait4, (pid, status, options, usage));
}
XP_EXPORT int pthread_join(pthread_t thread, void **ret) {
    REAL(pthread_join);
    TIMED(int, W_JOIN, pthread_join, (thread, ret));
}

/* The checked variants (declared above). */
XP_EXPORT ssize_t __read_chk(int fd, void *buf, size_t count, size_t buflen) {
    REAL(__read_chk);
    TIMED(ssize_t, W_READ, __read_chk, (fd, buf, count, buflen));
}
XP_EXPORT ssize_t __recv_chk(int fd, void *buf, size_t len, size_t buflen, int flags) {
    REAL(__recv_chk);
    TIMED(ssize_t, W_RECV, __recv_chk, (fd, buf, len, buflen, flags));
}
XP_EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t len, size_t buflen, int flags,
                                 struct sockaddr *from, socklen_t *fromlen) {
    REAL(__recvfrom_chk);
    TIMED(ssize_t, W_RECVFROM, __recvfrom_chk, (fd, buf, len, buflen, flags, from, fromlen));
}
XP_EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen) {
    REAL(__poll_chk);
    TIMED(int, W_POLL, __poll_chk, (fds, n, timeout, fdslen));
}

/* ---- draining (the sampler's scanner, under its drain lock) ---- */

static struct xp_batch_WAIT *wait_batch;
/* The waits' own stacks: ids with the top bit set, apart from the sampler's (one STACK id
 * space per stream). */
#define WAIT_STACK_ID_BIT 0x80000000u
static struct xp_stack_table stacks;
static uint32_t call_string[W_CALLS];

static void drain_block(struct wait_thread *w) {
    uint64_t tail = atomic_load_explicit(&w->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&w->head, memory_order_acquire);
    for (; tail != head; tail++) {
        const struct wait_slot *s = &w->ring[tail % WAIT_SLOTS];
        /* Modules first: a stack's pcs must be in the map written before it. */
        if (wait_batch->rows == 0) xp_modules_emit_if_changed();
        if (!call_string[s->call]) call_string[s->call] = xp_intern(call_names[s->call]);
        uint32_t r = wait_batch->rows++;
        wait_batch->tid[r] = (uint32_t)w->tid;
        wait_batch->start[r] = s->start;
        wait_batch->duration[r] = s->duration;
        wait_batch->call_id[r] = call_string[s->call];
        wait_batch->stack_id[r] =
            xp_stack_table_id(&stacks, s->pcs, s->n_native, s->python, s->n_python);
        wait_batch->unwind_end[r] = s->unwind_end;
        waits_drained++;
        if (wait_batch->rows == XP_BATCH_ROWS) xp_emit_WAIT(wait_batch);
        atomic_store_explicit(&w->tail, tail + 1, memory_order_release);
    }
    ring_full_total += atomic_exchange_explicit(&w->ring_full, 0, memory_order_relaxed);
}

void xp_waits_drain(void) {
    if (!wait_batch) return;
    for (struct wait_thread *w = atomic_load(&blocks); w; w = w->next) {
        int state = atomic_load_explicit(&w->state, memory_order_acquire);
        if (state == BLOCK_FREE) continue;
        drain_block(w);
        /* Its thread is gone and its last waits are out: the block is the next thread's. */
        if (state == BLOCK_EXITED) atomic_store_explicit(&w->state, BLOCK_FREE, memory_order_release);
    }
    xp_emit_WAIT(wait_batch);
}

void xp_waits_emit_counters(void) {
    if (!wait_batch) return;
    xp_emit_counter("cpu_wait_threshold_ns", waits_on ? threshold_ns : 0);
    xp_emit_counter("cpu_waits", waits_drained);
    xp_emit_counter("cpu_waits_ring_full", ring_full_total);
    xp_emit_counter("cpu_wait_stack_table_full", stacks.full);
    xp_emit_counter("cpu_waits_no_memory", atomic_load(&waits_no_block));
    xp_emit_counter("cpu_waits_outside_window", atomic_load(&waits_outside_window));
    xp_emit_counter("cpu_waits_python_faults", atomic_load(&waits_python_faults));
    xp_emit_counter("cpu_wait_record_ns", atomic_load(&record_ns));
}

void xp_waits_fork_child(void) {
    /* The parent drains what its threads recorded; the child's only thread keeps its block
     * (under its new tid), the others' are free. */
    for (struct wait_thread *w = atomic_load(&blocks); w; w = w->next) {
        atomic_store(&w->tail, atomic_load(&w->head));
        atomic_store(&w->ring_full, 0);
        if (w == self_block) w->tid = (pid_t)syscall(SYS_gettid);
        else atomic_store(&w->state, BLOCK_FREE);
    }
    xp_stack_table_reset(&stacks);
    memset(call_string, 0, sizeof call_string);
    ring_full_total = waits_drained = 0;
    atomic_store(&waits_total, 0);
    atomic_store(&waits_outside_window, 0);
    atomic_store(&waits_no_block, 0);
    atomic_store(&waits_python_faults, 0);
    atomic_store(&record_ns, 0);
}

void xp_waits_python_guarded(int on) { atomic_store(&python_guarded, on); }

void xp_waits_start(int python, struct xp_window_control *windows) {
    const char *env = getenv("XPU_PERF_WAIT_THRESHOLD_US");
    long us = env && *env ? strtol(env, NULL, 10) : DEFAULT_THRESHOLD_US;
    if (us <= 0) return;
    wait_batch = malloc(sizeof *wait_batch);
    int no_table =
        xp_stack_table_init(&stacks, WAIT_STACK_ID_BIT, 1u << 10, XP_STACK_TABLE_MAX_SLOTS);
    if (!wait_batch || no_table) {
        free(wait_batch);
        xp_stack_table_free(&stacks);
        wait_batch = NULL;
        return;
    }
    wait_batch->rows = 0;
    threshold_ns = (uint64_t)us * 1000ull;
    walk_python = python;
    window_control = windows;
    xp_modules_self_range((const void *)&wait_end, &self_lo, &self_hi);
    exit_key_ok = pthread_key_create(&exit_key, block_exited) == 0;
    waits_on = 1;
}
