/* In-process CPU sampler (libxpu_perf_sampler.so, loaded by LD_PRELOAD into every process of
 * the recorded tree): CPU-time timers per thread, native stacks walked by CFI from the
 * interrupted registers, Python frames read from the interpreter, written to
 * <XPU_PERF_CPU_OUT_DIR>/cpu-<pid>.xpstream.  Needs no privilege: POSIX timers on the process's
 * own thread CPU clocks work at any perf_event_paranoid.
 *
 *   XPU_PERF_CPU_HZ      samples per second of each thread's CPU time (unset or 0: off)
 *   XPU_PERF_CPU_OUT_DIR directory of the streams (required; the CUPTI library's
 *                        XPU_PERF_OUT_DIR is another source's directory)
 *   XPU_PERF_PYTHON     0: no Python frames (default 1)
 *   XPU_PERF_CPU_KERNEL 1: also take a sample on each SIGURG the eBPF kernel-mode sampler
 *                       sends (si_code SI_KERNEL; record sets this as root), marked so the
 *                       collector puts that sample's kernel stack on top.  SIGURG because
 *                       its default action is to ignore it: a process or thread without this
 *                       handler is unharmed; the target's own SIGURG handler still runs.
 *   XPU_PERF_CPU_CLOCK  timer: POSIX CPU-time timers even where perf events are allowed
 *                       (what a paranoid-3 system gets; default: perf events when allowed)
 *   XPU_PERF_WINDOW_CONTROL  the recording's capture-window page (window_control.h): with it,
 *                       threads are sampled only while a window is open; outside, their
 *                       clocks are stopped (no signals at all), not filtered after the fact
 *
 * Threads: a scanner thread lists /proc/self/task every SCAN_MS, gives each new thread a
 * sample clock and a sample ring.  The clock is a perf task-clock event of that thread (user
 * space only, so perf_event_paranoid 2 allows it for one's own threads), whose overflow
 * signals the thread (F_SETOWN_EX): hrtimer-precise, any frequency.  Where perf events are
 * refused (paranoid 3, seccomp), a POSIX timer on the thread's CPU clock (SIGEV_THREAD_ID)
 * instead: always allowed, but it expires on scheduler ticks, so above the kernel's HZ
 * periods merge and a program whose loop is a multiple of the tick is sampled at fixed
 * phases.  The scanner deletes the timers of threads that are gone, and drains the rings into the stream.
 * The signal handler only walks and copies into its own thread's ring (single producer,
 * single consumer, no locks, no allocation), so it is async-signal-safe; deduplication,
 * Python names and the stream are the scanner's work.  SA_RESTART: the target's system calls
 * are restarted, not failed with EINTR.
 *
 * The library is also the process's hooks (process_hooks.c; record preloads it for them even
 * without sampling): the final flush of both libraries at _exit, exec and a signal the
 * process sends itself, and its threads stopped around a change of user. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <setjmp.h>
#include <ucontext.h>
#include <unistd.h>

#include "modules.h"
#include "process_hooks.h"
#include "pyframes.h"
#include "stack_table.h"
#include "stream.h"
#include "strings.h"
#include "unwind.h"
#include "waits.h"
#include "window_control.h"

#define SAMPLE_SIGNAL SIGPROF
#define KERNEL_SIGNAL SIGURG
#define SCAN_MS 20
#define MAX_NATIVE 256
#define MAX_PYTHON 256 /* import chains nest deep: importlib adds ~7 frames a level */
/* 128 slots: at 999 Hz the scanner may be kept off the CPU for 128 ms before a sample is
 * lost (a loaded machine delays its 20 ms wake-ups; drops that line up with the program's
 * phases would bias the profile).  Pages are touched as slots fill: an idle thread costs few. */
#define RING_SLOTS 128
#define THREAD_MAGIC 0x78707573616d706cull

struct sample_slot {
    uint64_t timestamp;
    uint16_t n_native, n_python;
    uint32_t unwind_end;
    uint32_t trigger; /* 0: this thread's own clock; 1: the eBPF kernel-mode sampler */
    uint64_t pcs[MAX_NATIVE];
    struct xp_pyframe_key python[MAX_PYTHON];
};

/* One per sampled thread, mmap'ed by the scanner (the handler never allocates). */
struct sampled_thread {
    uint64_t magic;
    pid_t tid;
    timer_t timer;
    int has_timer;
    int perf_fd; /* -1: the POSIX timer is the clock */
    int perf_refreshed; /* its overflow budget is set (once; later openings only enable it) */
    int armed;          /* the clock runs (a capture window, or no window mode) */
    ino_t perf_ino; /* the event's inode: the fd is closed only while it is still ours */
    int seen; /* scan generation that last listed this thread */
    struct sampled_thread *next;
    _Atomic uint64_t head, tail; /* slots written by the handler / read by the scanner */
    uint64_t stack_hi;           /* top of the thread's stack; 0: not looked up yet */
    int stack_lookup_failed;
    uint64_t ring_full, in_handler;
    int busy;
    struct xp_rule_cache rules;
    struct xp_line_cache lines;
    struct sample_slot ring[RING_SLOTS];
};

static int sample_hz;
static int want_python = 1;
/* Capture windows: NULL without a window mode (always sampling). `sampling` is what the
 * clocks were last set to, changed under drain_lock by the scanner. */
static struct xp_window_control *window_control;
static atomic_int sampling = 1;
static _Atomic uint64_t samples_outside_window;
static struct sampled_thread *threads; /* scanner's list */
static pthread_t scanner_thread;
static atomic_int scanner_stop;
static int scan_generation;
static struct sigaction previous_action, previous_urg_action;

static void chain(const struct sigaction *prev, int sig, siginfo_t *info, void *context) {
    if (prev->sa_flags & SA_SIGINFO) {
        if (prev->sa_sigaction) prev->sa_sigaction(sig, info, context);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
    }
}
/* perf event fd -> its thread, for the handler (si_fd); filled before the event is enabled. */
#define MAX_FDS 65536
static struct sampled_thread *_Atomic *fd_threads;
static uint64_t perf_clocks, timer_clocks;
/* tid -> thread, for signals that carry no pointer (the eBPF sampler's); tid % TID_SLOTS. */
#define TID_SLOTS 65536
static struct sampled_thread *_Atomic *tid_threads;
static int kernel_join;
static _Atomic uint64_t kernel_signals_unmatched;
static uint64_t timers_failed, threads_sampled, samples_total, ring_full_total, foreign_signals;
/* Perf clocks found closed or replaced by the target (closerange, dup2) and opened again. */
static uint64_t clocks_restarted;
static uint64_t unwind_ends[XP_END_COUNT];
static uint64_t python_samples;

/* Fault recovery for the Python walk: a stale frame pointer read in the handler faults; the
 * fault handler jumps back to the walk's caller instead of letting the target die.  Faults
 * anywhere else go to the handler that was there before (the target's, or the default). */
static __thread sigjmp_buf *walk_recovery __attribute__((tls_model("initial-exec")));
static struct sigaction previous_segv, previous_bus;
static _Atomic uint64_t walk_faults;

static void on_fault(int sig, siginfo_t *info, void *context) {
    sigjmp_buf *recovery = walk_recovery ? walk_recovery : xp_waits_walk_recovery;
    if (recovery) {
        walk_recovery = NULL;
        xp_waits_walk_recovery = NULL;
        siglongjmp(*recovery, 1);
    }
    struct sigaction *prev = sig == SIGSEGV ? &previous_segv : &previous_bus;
    if ((prev->sa_flags & SA_SIGINFO) && prev->sa_sigaction) {
        prev->sa_sigaction(sig, info, context);
    } else if (prev->sa_handler != SIG_DFL && prev->sa_handler != SIG_IGN) {
        prev->sa_handler(sig);
    } else {
        /* The default action: restored, the faulting instruction runs again and faults. */
        sigaction(sig, prev, NULL);
    }
}

/* Ours on top, with whatever the target installed since as the one to chain to. */
static void keep_fault_handlers(void) {
    int sigs[2] = {SIGSEGV, SIGBUS};
    struct sigaction *prev[2] = {&previous_segv, &previous_bus};
    for (int i = 0; i < 2; i++) {
        struct sigaction cur;
        if (sigaction(sigs[i], NULL, &cur) != 0) continue;
        if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_fault) continue;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_fault;
        /* SA_NODEFER: the jump leaves the handler without sigreturn, so SIGSEGV must not
         * stay blocked; SA_ONSTACK: a fault from stack overflow still gets a handler. */
        sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK | SA_RESTART;
        sigemptyset(&sa.sa_mask);
        if (sigaction(sigs[i], &sa, prev[i]) != 0) continue;
    }
}
static _Atomic uint64_t timer_overruns; /* periods the kernel folded into one signal */
/* The sampler's own cost: time in the handler (all threads) and the scanner's CPU time. */
static _Atomic uint64_t handler_ns;
static _Atomic uint64_t scanner_ns; /* the scanner's CPU time, updated by itself each round */

/* ---- the signal handler ---- */

static void take_sample(struct sampled_thread *t, int trigger, void *context);

/* SIGURG: the eBPF kernel-mode sampler's (SI_KERNEL), then whatever the target does with it. */
static void on_kernel_signal(int sig, siginfo_t *info, void *context) {
    if (info->si_code == SI_KERNEL && tid_threads) {
        int saved_errno = errno;
        pid_t tid = (pid_t)syscall(SYS_gettid);
        struct sampled_thread *t = atomic_load_explicit(&tid_threads[tid % TID_SLOTS], memory_order_acquire);
        if (t && t->tid == tid && t->magic == THREAD_MAGIC) {
            /* The eBPF sampler is paused outside windows from record's side, within a
             * drain round (~100 ms): what it sent in between is no sample either. */
            if (xp_window_any_open(window_control)) take_sample(t, 1, context);
            else atomic_fetch_add_explicit(&samples_outside_window, 1, memory_order_relaxed);
        } else {
            atomic_fetch_add(&kernel_signals_unmatched, 1);
        }
        errno = saved_errno;
    }
    chain(&previous_urg_action, sig, info, context);
}

static void on_sample_signal(int sig, siginfo_t *info, void *context) {
    struct sampled_thread *t = NULL;
    if (info->si_code == SI_TIMER) t = info->si_value.sival_ptr;
    else if (info->si_code == POLL_IN && fd_threads && info->si_fd >= 0 && info->si_fd < MAX_FDS)
        t = atomic_load_explicit(&fd_threads[info->si_fd], memory_order_acquire);
    if (!t || t->magic != THREAD_MAGIC) {
        /* Not one of our timers: the target's own SIGPROF use keeps working. */
        foreign_signals++;
        chain(&previous_action, sig, info, context);
        return;
    }
    int saved_errno = errno;
    /* Signals already queued when the window closed (the clocks stop at the scanner's next
     * round): the window is over, so no sample. */
    if (!xp_window_any_open(window_control)) {
        atomic_fetch_add_explicit(&samples_outside_window, 1, memory_order_relaxed);
        errno = saved_errno;
        return;
    }
    if (info->si_code == SI_TIMER && info->si_overrun > 0)
        atomic_fetch_add_explicit(&timer_overruns, (uint64_t)info->si_overrun, memory_order_relaxed);
    take_sample(t, 0, context);
    errno = saved_errno;
}

static void take_sample(struct sampled_thread *t, int trigger, void *context) {
    if (t->busy) { t->in_handler++; return; }
    uint64_t entered = xp_now_ns();
    t->busy = 1;
    uint64_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
    uint64_t tail = atomic_load_explicit(&t->tail, memory_order_acquire);
    if (head - tail >= RING_SLOTS) {
        t->ring_full++;
    } else {
        struct sample_slot *slot = &t->ring[head % RING_SLOTS];
        const ucontext_t *uc = context;
        struct xp_regs regs = {(uint64_t)uc->uc_mcontext.gregs[REG_RIP],
                               (uint64_t)uc->uc_mcontext.gregs[REG_RSP],
                               (uint64_t)uc->uc_mcontext.gregs[REG_RBP]};
        slot->timestamp = xp_now_ns();
        slot->trigger = (uint32_t)trigger;
        if (!t->stack_hi && !t->stack_lookup_failed) {
            uint64_t lo;
            if (xp_stack_bounds(regs.rsp, &lo, &t->stack_hi) != 0) t->stack_hi = 0;
            if (!t->stack_hi) t->stack_lookup_failed = 1;
        }
        enum xp_unwind_end end = XP_END_NO_STACK;
        int n = 0;
        if (t->stack_hi > regs.rsp) {
            n = xp_unwind_regs(&regs, t->stack_hi, &t->rules, slot->pcs, MAX_NATIVE, &end);
        } else if (regs.rip >= 4096) {
            slot->pcs[0] = regs.rip;
            n = 1;
        }
        slot->n_native = (uint16_t)n;
        slot->unwind_end = (uint32_t)end;
        int n_python = 0;
        if (want_python) {
            sigjmp_buf recovery;
            if (sigsetjmp(recovery, 0) == 0) {
                walk_recovery = &recovery;
                n_python = xp_py_walk_lines(slot->python, MAX_PYTHON, &t->lines);
                walk_recovery = NULL;
            } else {
                atomic_fetch_add_explicit(&walk_faults, 1, memory_order_relaxed);
                n_python = 0;
            }
        }
        slot->n_python = (uint16_t)n_python;
        atomic_store_explicit(&t->head, head + 1, memory_order_release);
    }
    t->busy = 0;
    atomic_fetch_add_explicit(&handler_ns, xp_now_ns() - entered, memory_order_relaxed);
}

/* ---- threads and timers (scanner thread) ---- */

static int perf_refused; /* once refused, not asked again for every thread */

/* A task-clock perf event of thread tid that signals it every period of its CPU time. */
static int start_perf_clock(struct sampled_thread *t, long period_ns) {
    if (perf_refused || !fd_threads) return -1;
    struct perf_event_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.size = sizeof attr;
    attr.type = PERF_TYPE_SOFTWARE;
    attr.config = PERF_COUNT_SW_TASK_CLOCK;
    attr.sample_period = (uint64_t)period_ns;
    attr.disabled = 1;
    attr.exclude_kernel = 1;
    attr.exclude_hv = 1;
    int fd = (int)syscall(SYS_perf_event_open, &attr, t->tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        if (errno == EACCES || errno == EPERM || errno == ENOSYS) perf_refused = 1;
        return -1;
    }
    struct f_owner_ex owner = {F_OWNER_TID, t->tid};
    if (fd >= MAX_FDS || fcntl(fd, F_SETFL, O_ASYNC | O_NONBLOCK) != 0 ||
        fcntl(fd, F_SETSIG, SAMPLE_SIGNAL) != 0 || fcntl(fd, F_SETOWN_EX, &owner) != 0) {
        close(fd);
        return -1;
    }
    atomic_store_explicit(&fd_threads[fd], t, memory_order_release);
    struct stat st;
    t->perf_ino = fstat(fd, &st) == 0 ? st.st_ino : 0;
    t->perf_fd = fd;
    return 0;
}

/* The target may have closed our fd (closefrom, a daemon's fd sweep) and reused the number. */
static int still_ours(const struct sampled_thread *t) {
    struct stat st;
    return fstat(t->perf_fd, &st) == 0 && st.st_ino == t->perf_ino;
}

/* Start (on) or stop (off) the thread's clock; a stopped clock sends no signal. */
static int arm_clock(struct sampled_thread *t, int on) {
    if (t->perf_fd >= 0) {
        if (!still_ours(t)) return -1;
        if (!on) return ioctl(t->perf_fd, PERF_EVENT_IOC_DISABLE, 0);
        if (t->perf_refreshed) return ioctl(t->perf_fd, PERF_EVENT_IOC_ENABLE, 0);
        /* Signal on each of the next 2^30 overflows: 12 days of one thread's CPU time at
         * 999 Hz.  Past that the event disables itself and its last signal (POLL_HUP) is no
         * sample.  Set once: a second refresh would add to the budget and overflow it. */
        if (ioctl(t->perf_fd, PERF_EVENT_IOC_REFRESH, 1 << 30) != 0) return -1;
        t->perf_refreshed = 1;
        return 0;
    }
    if (!t->has_timer) return -1;
    struct itimerspec spec;
    memset(&spec, 0, sizeof spec);
    if (on) {
        long period_ns = 1000000000L / sample_hz;
        /* Threads start at a random phase so that sampling does not line up across threads. */
        long first_ns = 1 + (long)((uint64_t)t->tid * 2654435761u % (uint64_t)period_ns);
        spec.it_interval = (struct timespec){period_ns / 1000000000L, period_ns % 1000000000L};
        spec.it_value = (struct timespec){first_ns / 1000000000L, first_ns % 1000000000L};
    }
    return timer_settime(t->timer, 0, &spec, NULL);
}

static void stop_clock(struct sampled_thread *t) {
    if (t->perf_fd >= 0) {
        atomic_store(&fd_threads[t->perf_fd], NULL);
        if (still_ours(t)) {
            ioctl(t->perf_fd, PERF_EVENT_IOC_DISABLE, 0);
            close(t->perf_fd);
        }
        t->perf_fd = -1;
    }
    if (t->has_timer) timer_delete(t->timer);
    t->has_timer = 0;
}

/* The target closed our perf event (os.closerange, a daemon's fd sweep) or put another file
 * on its number: the number is the target's now (left open), the thread gets a new clock. */
static void restart_perf_clock(struct sampled_thread *t) {
    if (fd_threads) atomic_store(&fd_threads[t->perf_fd], NULL);
    t->perf_fd = -1;
    t->perf_refreshed = 0;
    t->armed = 0;
    if (start_perf_clock(t, 1000000000L / sample_hz) != 0) { timers_failed++; return; }
    if (atomic_load(&sampling) && arm_clock(t, 1) == 0) t->armed = 1;
    clocks_restarted++;
}

static struct sampled_thread *start_thread_sampling(pid_t tid) {
    struct sampled_thread *t = mmap(NULL, sizeof *t, PROT_READ | PROT_WRITE,
                                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (t == MAP_FAILED) { timers_failed++; return NULL; }
    t->magic = THREAD_MAGIC;
    t->tid = tid;
    t->perf_fd = -1;
    long period_ns = 1000000000L / sample_hz;
    if (start_perf_clock(t, period_ns) == 0) {
        if (!atomic_load(&sampling) || arm_clock(t, 1) == 0) {
            t->armed = atomic_load(&sampling);
            perf_clocks++;
            goto started;
        }
        atomic_store(&fd_threads[t->perf_fd], NULL);
        close(t->perf_fd);
        t->perf_fd = -1;
    }
    /* The CPU clock of another thread of this process: MAKE_THREAD_CPUCLOCK(tid, SCHED). */
    clockid_t clock = (clockid_t)((~(unsigned)tid << 3) | 6);
    struct sigevent ev;
    memset(&ev, 0, sizeof ev);
    ev.sigev_notify = SIGEV_THREAD_ID;
    ev.sigev_signo = SAMPLE_SIGNAL;
    ev.sigev_value.sival_ptr = t;
    ev._sigev_un._tid = tid;
    if (timer_create(clock, &ev, &t->timer) != 0) {
        timers_failed++;
        munmap(t, sizeof *t);
        return NULL;
    }
    t->has_timer = 1;
    if (atomic_load(&sampling) && arm_clock(t, 1) != 0) {
        timer_delete(t->timer);
        timers_failed++;
        munmap(t, sizeof *t);
        return NULL;
    }
    t->armed = atomic_load(&sampling);
    timer_clocks++;
started:
    threads_sampled++;
    if (tid_threads) atomic_store_explicit(&tid_threads[tid % TID_SLOTS], t, memory_order_release);
    char path[64], name[32] = {0};
    snprintf(path, sizeof path, "/proc/self/task/%d/comm", (int)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, name, sizeof name - 1);
        close(fd);
        if (r > 0 && name[r - 1] == '\n') name[r - 1] = 0;
    }
    xp_emit_thread((uint32_t)tid, name);
    return t;
}

/* ---- draining rings into the stream ---- */

/* The sampler's stacks (ids from 1; the waits' have the top bit). */
static struct xp_stack_table stacks;
static struct xp_batch_CPU_SAMPLE *sample_batch;

static uint32_t stack_id_of(const struct sample_slot *s) {
    if (s->n_native == 0 && s->n_python == 0) return 0;
    return xp_stack_table_id(&stacks, s->pcs, s->n_native, s->python, s->n_python);
}

static void drain_thread(struct sampled_thread *t) {
    uint64_t tail = atomic_load_explicit(&t->tail, memory_order_relaxed);
    uint64_t head = atomic_load_explicit(&t->head, memory_order_acquire);
    for (; tail != head; tail++) {
        const struct sample_slot *s = &t->ring[tail % RING_SLOTS];
        /* Modules first: a sample's pcs must be in the map written before it. */
        if (sample_batch->rows == 0) xp_modules_emit_if_changed();
        uint32_t r = sample_batch->rows++;
        sample_batch->tid[r] = (uint32_t)t->tid;
        sample_batch->timestamp[r] = s->timestamp;
        sample_batch->stack_id[r] = stack_id_of(s);
        sample_batch->unwind_end[r] = s->unwind_end;
        sample_batch->trigger[r] = s->trigger;
        if (s->unwind_end < XP_END_COUNT) unwind_ends[s->unwind_end]++;
        if (s->n_python) python_samples++;
        samples_total++;
        if (sample_batch->rows == XP_BATCH_ROWS) xp_emit_CPU_SAMPLE(sample_batch);
        atomic_store_explicit(&t->tail, tail + 1, memory_order_release);
    }
    ring_full_total += t->ring_full;
    t->ring_full = 0;
}

static pthread_mutex_t drain_lock = PTHREAD_MUTEX_INITIALIZER;

static void drain_all(void) {
    pthread_mutex_lock(&drain_lock);
    xp_modules_emit_if_changed();
    for (struct sampled_thread *t = threads; t; t = t->next) drain_thread(t);
    xp_emit_CPU_SAMPLE(sample_batch);
    xp_waits_drain();
    pthread_mutex_unlock(&drain_lock);
}

static void scan_threads(void) {
    DIR *dir = opendir("/proc/self/task");
    if (!dir) return;
    pid_t self = (pid_t)syscall(SYS_gettid);
    int gen = ++scan_generation;
    struct dirent *e;
    while ((e = readdir(dir))) {
        pid_t tid = (pid_t)atoi(e->d_name);
        if (tid <= 0 || tid == self) continue;
        struct sampled_thread *t = threads;
        while (t && t->tid != tid) t = t->next;
        if (!t) {
            if (atomic_load(&scanner_stop)) continue; /* the final flush has begun */
            t = start_thread_sampling(tid);
            if (!t) continue;
            pthread_mutex_lock(&drain_lock);
            t->next = threads;
            threads = t;
            pthread_mutex_unlock(&drain_lock);
        }
        t->seen = gen;
        if (t->perf_fd >= 0 && !still_ours(t)) restart_perf_clock(t);
    }
    closedir(dir);
    /* Threads that exited: drain what they left, then free. */
    pthread_mutex_lock(&drain_lock);
    for (struct sampled_thread **pp = &threads; *pp;) {
        struct sampled_thread *t = *pp;
        if (t->seen == gen) { pp = &t->next; continue; }
        stop_clock(t);
        if (tid_threads) {
            struct sampled_thread *expected = t;
            atomic_compare_exchange_strong(&tid_threads[t->tid % TID_SLOTS], &expected, NULL);
        }
        drain_thread(t);
        *pp = t->next;
        munmap(t, sizeof *t);
    }
    pthread_mutex_unlock(&drain_lock);
}

/* Start or stop every thread's clock when the recording's windows open or all close. */
static void follow_windows(void) {
    int open = xp_window_any_open(window_control);
    if (open == atomic_load(&sampling)) return;
    pthread_mutex_lock(&drain_lock);
    atomic_store(&sampling, open);
    for (struct sampled_thread *t = threads; t; t = t->next) {
        if (t->armed != open && arm_clock(t, open) == 0) t->armed = open;
    }
    pthread_mutex_unlock(&drain_lock);
}

static void *scanner_main(void *arg) {
    (void)arg;
    prctl(PR_SET_NAME, "xpu-perf-sampler", 0, 0, 0);
    /* This thread is the sampler's own: it is never sampled, and never interrupted (the
     * target's signals go to its own threads: a handler that ends the process runs the
     * final flush, which must not find this thread inside a drain). */
    sigset_t block;
    sigfillset(&block);
    pthread_sigmask(SIG_BLOCK, &block, NULL);
    while (!atomic_load(&scanner_stop)) {
        if (want_python && !xp_py_enabled) { /* an interpreter loaded later */
            /* Under drain_lock: a fork waits for it (fork_prepare), so no child inherits the
             * reader's lock held mid-lookup (runuser's child hung on it). */
            pthread_mutex_lock(&drain_lock);
            xp_py_init();
            pthread_mutex_unlock(&drain_lock);
        }
        /* Only a process with an interpreter walks Python frames, and so needs them. */
        if (want_python && xp_py_enabled) {
            keep_fault_handlers();
            xp_waits_python_guarded(1);
        }
        if (window_control) follow_windows();
        scan_threads();
        drain_all();
        struct timespec own;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &own);
        atomic_store(&scanner_ns, (uint64_t)own.tv_sec * 1000000000ull + (uint64_t)own.tv_nsec);
        struct timespec ts = {0, SCAN_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void emit_counters(void) {
    xp_emit_counter("cpu_sample_frequency_hz", (uint64_t)sample_hz);
    xp_emit_counter("cpu_samples", samples_total);
    xp_emit_counter("cpu_samples_with_python", python_samples);
    xp_emit_counter("cpu_samples_ring_full", ring_full_total);
    xp_emit_counter("cpu_stack_table_full", stacks.full);
    xp_emit_counter("cpu_threads_sampled", threads_sampled);
    xp_emit_counter("cpu_timers_failed", timers_failed);
    xp_emit_counter("cpu_clocks_restarted", clocks_restarted);
    xp_emit_counter("cpu_threads_perf_clock", perf_clocks);
    xp_emit_counter("cpu_threads_posix_timer", timer_clocks);
    xp_emit_counter("cpu_foreign_signals", foreign_signals);
    xp_emit_counter("cpu_samples_outside_window", atomic_load(&samples_outside_window));
    xp_emit_counter("cpu_kernel_signals_unmatched", atomic_load(&kernel_signals_unmatched));
    /* CPU-time timers expire on scheduler ticks: above the kernel's HZ, periods are merged. */
    xp_emit_counter("cpu_timer_overruns", atomic_load(&timer_overruns));
    xp_emit_counter("cpu_handler_ns", atomic_load(&handler_ns));
    xp_emit_counter("cpu_python_walk_faults", atomic_load(&walk_faults));
    /* Up to its last round; the final drain runs on the exiting thread, in process_ns. */
    xp_emit_counter("cpu_scanner_ns", atomic_load(&scanner_ns));
    struct timespec process_cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &process_cpu);
    xp_emit_counter("cpu_process_ns", (uint64_t)process_cpu.tv_sec * 1000000000ull + (uint64_t)process_cpu.tv_nsec);
    static const char *const names[XP_END_COUNT] = {
        "cpu_unwind_complete", "cpu_unwind_stopped_no_cfi", "cpu_unwind_stopped_bad_stack",
        "cpu_unwind_stopped_bad_pc", "cpu_unwind_stopped_max_depth", "cpu_unwind_stopped_no_stack"};
    for (int i = 0; i < XP_END_COUNT; i++) xp_emit_counter(names[i], unwind_ends[i]);
    uint64_t fp = 0;
    for (struct sampled_thread *t = threads; t; t = t->next) fp += t->rules.fp_steps;
    xp_emit_counter("cpu_unwind_fp_steps", fp);
    xp_emit_counter("cpu_python_frames_enabled", (uint64_t)(want_python && xp_py_enabled));
    xp_emit_counter("cpu_python_unsupported_minor", want_python && xp_py_minor && !xp_py_enabled ? xp_py_minor : 0);
    xp_emit_counter("cpu_python_guard_failures", xp_py_guard_failures);
    xp_waits_emit_counters();
}

static void stop_timers(void) {
    for (struct sampled_thread *t = threads; t; t = t->next) stop_clock(t);
}

static void flush_hook(int final) {
    if (!final) return;
    atomic_store(&scanner_stop, 1);
    /* No new samples once the final flush begins; drain the rest. */
    pthread_mutex_lock(&drain_lock);
    stop_timers();
    pthread_mutex_unlock(&drain_lock);
    drain_all();
    emit_counters();
}

static void at_exit(void) { xp_stream_flush(1); }

static int start_sampling(void);
static int scanner_running;
static pid_t scanner_pid; /* the process whose scanner runs (not a vfork()ed child's) */

/* The process changes user: the scanner and the writer stop first (process_hooks.c). */
static int xp_sampler_pause(void) {
    int paused = 0;
    if (scanner_running && scanner_pid == getpid()) {
        atomic_store(&scanner_stop, 1);
        pthread_join(scanner_thread, NULL);
        scanner_running = 0;
        paused |= 1;
    }
    if (xp_stream_pause_writer()) paused |= 2;
    return paused;
}

static void xp_sampler_resume(int paused) {
    if (paused & 2) xp_stream_resume_writer();
    if (paused & 1) {
        atomic_store(&scanner_stop, 0);
        scanner_running = pthread_create(&scanner_thread, NULL, scanner_main, NULL) == 0;
    }
}

static int start_sampling(void) {
    sample_batch = malloc(sizeof *sample_batch);
    if (xp_stack_table_init(&stacks, 0, 1u << 14, XP_STACK_TABLE_MAX_SLOTS) != 0 || !sample_batch)
        return -1;
    sample_batch->rows = 0;
    atomic_store(&scanner_stop, 0);
    int r = pthread_create(&scanner_thread, NULL, scanner_main, NULL);
    scanner_running = r == 0;
    scanner_pid = getpid();
    return r;
}

/* fork() waits for the scanner's drain round: the child must not inherit the Python frame,
 * string or module tables (or their locks) half way through an update. */
static void fork_prepare(void) { pthread_mutex_lock(&drain_lock); }
static void fork_parent(void) { pthread_mutex_unlock(&drain_lock); }

/* fork(): timers and the scanner are not inherited; the child samples its own threads into
 * its own stream (stream.c opens it in its own fork handler, registered before this one), with
 * frame and string ids of its own. */
static void fork_child(void) {
    scanner_running = 0;
    struct sampled_thread *t = threads;
    while (t) {
        struct sampled_thread *n = t->next;
        if (t->perf_fd >= 0) {
            atomic_store(&fd_threads[t->perf_fd], NULL);
            if (still_ours(t)) close(t->perf_fd);
        }
        munmap(t, sizeof *t);
        t = n;
    }
    threads = NULL;
    if (tid_threads) memset((void *)tid_threads, 0, TID_SLOTS * sizeof *tid_threads);
    pthread_mutex_init(&drain_lock, NULL);
    xp_stack_table_reset(&stacks);
    samples_total = python_samples = ring_full_total = threads_sampled = timers_failed = 0;
    clocks_restarted = 0;
    perf_clocks = timer_clocks = 0;
    foreign_signals = 0;
    atomic_store(&timer_overruns, 0);
    atomic_store(&handler_ns, 0);
    atomic_store(&walk_faults, 0);
    atomic_store(&scanner_ns, 0);
    atomic_store(&samples_outside_window, 0);
    memset(unwind_ends, 0, sizeof unwind_ends);
    xp_modules_reset();
    xp_strings_reset();
    xp_py_fork_child();
    xp_waits_fork_child();
    if (xp_stream_enabled()) {
        xp_stack_table_free(&stacks);
        free(sample_batch);
        start_sampling();
    }
}

__attribute__((constructor)) static void sampler_init(void) {
    xp_on_user_change(xp_sampler_pause, xp_sampler_resume);
    const char *hz = getenv("XPU_PERF_CPU_HZ");
    if (!hz || atoi(hz) <= 0 || !getenv("XPU_PERF_CPU_OUT_DIR")) return;
    sample_hz = atoi(hz);
    if (sample_hz > 10000) sample_hz = 10000;
    const char *py = getenv("XPU_PERF_PYTHON");
    want_python = !(py && strcmp(py, "0") == 0);
    if (want_python) {
        xp_py_init();
        if (xp_py_enabled) {
            keep_fault_handlers();
            xp_waits_python_guarded(1);
        }
    }
    xp_stream_prefix = "cpu";
    xp_stream_dir_env = "XPU_PERF_CPU_OUT_DIR";
    const char *clock = getenv("XPU_PERF_CPU_CLOCK");
    if (clock && strcmp(clock, "timer") == 0) perf_refused = 1;
    window_control = xp_window_control();
    atomic_store(&sampling, xp_window_any_open(window_control));
    if (xp_stream_start() != 0) return;
    xp_waits_start(want_python, window_control);
    fd_threads = mmap(NULL, MAX_FDS * sizeof *fd_threads, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (fd_threads == MAP_FAILED) fd_threads = NULL;
    tid_threads = mmap(NULL, TID_SLOTS * sizeof *tid_threads, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (tid_threads == MAP_FAILED) tid_threads = NULL;
    const char *kernel = getenv("XPU_PERF_CPU_KERNEL");
    kernel_join = kernel && strcmp(kernel, "1") == 0;
    xp_stream_set_flush_hook(flush_hook);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_sample_signal;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    /* Each handler holds the other's signal back.  Pending together (a sample clock's
     * overflow while the thread was in the kernel, where the eBPF sampler caught it too), the
     * kernel would start one handler and stack the other on it at its first instruction: that
     * sample's stack would be the sampler's handler, not the program (~15% of the samples of
     * a recording where the two clocks fall into step).  Held back, it is delivered when the
     * first handler returns, with the program's own interrupted context. */
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, KERNEL_SIGNAL);
    sigaction(SAMPLE_SIGNAL, &sa, &previous_action);
    sigdelset(&sa.sa_mask, KERNEL_SIGNAL);
    sigaddset(&sa.sa_mask, SAMPLE_SIGNAL);
    if (kernel_join) {
        sa.sa_sigaction = on_kernel_signal;
        sigaction(KERNEL_SIGNAL, &sa, &previous_urg_action);
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
    xpu_perf_on_exit(xp_stream_flush);
    if (start_sampling() != 0) return;
    /* The thread that loaded us (the main thread) is sampled from the first scan on. */
}
