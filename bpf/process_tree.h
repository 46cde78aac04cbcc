/* Which processes belong to the recorded target: its process tree, followed through fork.
 *
 * `tracked` holds tgids of processes in the tree (plus tids of their threads, inserted by the
 * same fork hook and harmless: filters compare against the tgid).  Entries are removed when a
 * thread exits, and a process's tgid when its whole thread group is dead, so pid reuse after
 * the target ends never pulls unrelated processes in.
 *
 * `spawner[0]` is the tgid of the recorder while it starts the target: its forks are
 * followed too, so the target is tracked from its first instruction (no race between fork
 * and inserting its pid).  User space clears it once the target is running.
 *
 * Only tracepoint arguments and helpers are used, never kernel structs: the headers bcc
 * compiles against need not match the running kernel.
 */
#pragma once

#include <uapi/linux/ptrace.h>

/* Keep in sync with collector/sources/bcc_events.py */
#define XP_EV_SAMPLE 1
#define XP_EV_FORK 2
#define XP_EV_EXEC 3
#define XP_EV_EXIT 4
#define XP_EV_LAUNCH 5

#define XP_CNT_EVENTS 0          /* events delivered to the ring buffer */
#define XP_CNT_RINGBUF_FULL 1    /* events lost: ring buffer had no room */
#define XP_CNT_USTACK_ERR 2      /* bpf_get_stack(user) failed */
#define XP_CNT_KSTACK_ERR 3      /* bpf_get_stack(kernel) failed */
#define XP_CNT_TRACK_FULL 4      /* a forked task could not be tracked (map full) */
#define XP_CNT_USTACK_TRUNC 5    /* user stack deeper than XP_MAX_FRAMES: truncated */
#define XP_CNT_N 6

#ifndef XP_TRACK_MAX
#define XP_TRACK_MAX 65536
#endif

struct xp_task_event {
    u32 kind;
    u32 pid;     /* tgid */
    u32 tid;
    u32 ppid;    /* fork: parent's tgid; exec/exit: 0 */
    u64 ts;
    char comm[16];
};

BPF_HASH(tracked, u32, u8, XP_TRACK_MAX);
BPF_ARRAY(spawner, u32, 1);
BPF_PERCPU_ARRAY(counters, u64, XP_CNT_N);
BPF_RINGBUF_OUTPUT(events, XP_RINGBUF_PAGES);

static __always_inline void xp_count(int idx)
{
    u64 *c = counters.lookup(&idx);
    if (c)
        (*c)++;
}

static __always_inline int xp_is_tracked(u32 tgid)
{
    return tracked.lookup(&tgid) != NULL;
}

static __always_inline void xp_task_event(u32 kind, u32 pid, u32 tid, u32 ppid)
{
    struct xp_task_event *ev = events.ringbuf_reserve(sizeof(struct xp_task_event));
    if (!ev) {
        xp_count(XP_CNT_RINGBUF_FULL);
        return;
    }
    ev->kind = kind;
    ev->pid = pid;
    ev->tid = tid;
    ev->ppid = ppid;
    ev->ts = bpf_ktime_get_ns();
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    events.ringbuf_submit(ev, 0);
    xp_count(XP_CNT_EVENTS);
}

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    int zero = 0;
    u32 *sp = spawner.lookup(&zero);
    if (!xp_is_tracked(tgid) && !(sp && *sp != 0 && *sp == tgid))
        return 0;
    u32 child = args->child_pid;
    u8 one = 1;
    if (tracked.update(&child, &one) != 0) {
        xp_count(XP_CNT_TRACK_FULL);
        return 0;
    }
    /* For a new thread, child is a tid of the parent's group; user space tells threads from
     * processes by whether samples later arrive with pid == child. */
    xp_task_event(XP_EV_FORK, child, child, tgid);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exec)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!xp_is_tracked(tgid))
        return 0;
    xp_task_event(XP_EV_EXEC, tgid, (u32)id, 0);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32, tid = (u32)id;
    if (!xp_is_tracked(tgid) && !xp_is_tracked(tid))
        return 0;
    if (tid != tgid)
        tracked.delete(&tid);
    if (args->group_dead) {
        xp_task_event(XP_EV_EXIT, tgid, tid, 0);
        tracked.delete(&tgid);
    }
    return 0;
}
