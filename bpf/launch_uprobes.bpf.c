/* Launch uprobes: one record with the caller's user stack each time a probed launch function
 * is entered by a thread of the target's process tree.
 *
 * on_launch_marker sits on the injection library's
 *     void xpu_perf_launch_marker(uint64_t correlation_id, uint32_t api_id)
 * which the library calls from its CUPTI API callback, so each stack carries the exact
 * correlation id of the one launch it belongs to.  on_launch_api sits on cudaLaunchKernel /
 * cuLaunchKernel when no injection library is loaded; XP_PROBE_* tells which symbol fired.
 */
#include "process_tree.h"

#define XP_MAX_FRAMES 127

struct xp_launch_event {
    u32 kind;
    u32 pid;
    u32 tid;
    u32 probe;          /* index into the probe table user space attached */
    u64 ts;
    char comm[16];
    u64 correlation_id; /* marker: first argument; API probes: 0 */
    u32 api_id;         /* marker: second argument; API probes: 0 */
    s32 ustack_bytes;
    u64 return_addr;    /* *(u64 *)sp at entry: the caller, see below; 0 if unreadable */
    u64 ustack[XP_MAX_FRAMES];
};

/* The record is built here and only its used part goes to the ring buffer: launch stacks are
 * ~16 frames, so a fixed 1 KiB record filled the buffer at launch-bound rates (44% of the
 * records lost on the H100, docs/benchmarks.md). */
BPF_PERCPU_ARRAY(launch_scratch, struct xp_launch_event, 1);

static __always_inline int xp_emit_launch(struct pt_regs *ctx, u32 probe, u64 correlation_id, u32 api_id)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (!xp_is_tracked(tgid))
        return 0;
    u32 zero = 0;
    struct xp_launch_event *ev = launch_scratch.lookup(&zero);
    if (!ev)
        return 0;
    ev->kind = XP_EV_LAUNCH;
    ev->pid = tgid;
    ev->tid = (u32)id;
    ev->probe = probe;
    ev->ts = bpf_ktime_get_ns();
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
    ev->correlation_id = correlation_id;
    ev->api_id = api_id;
    /* At a function's first instruction its frame is not set up yet: a frame-pointer walk
     * goes from the entry address straight to the caller's caller and loses the caller.
     * Its return address sits at the top of the stack; user space puts it back as frame 1
     * unless the kernel already did (6.12+ does so for functions starting with push %rbp). */
    if (bpf_probe_read_user(&ev->return_addr, sizeof(ev->return_addr), (void *)PT_REGS_SP(ctx)) != 0)
        ev->return_addr = 0;
    ev->ustack_bytes = bpf_get_stack(ctx, ev->ustack, sizeof(ev->ustack), BPF_F_USER_STACK);
    if (ev->ustack_bytes < 0)
        xp_count(XP_CNT_USTACK_ERR);
    else if (ev->ustack_bytes == sizeof(ev->ustack))
        xp_count(XP_CNT_USTACK_TRUNC);
    u64 len = offsetof(struct xp_launch_event, ustack) + (ev->ustack_bytes > 0 ? ev->ustack_bytes : 0);
    /* Hide len's origin from clang so the bound below is checked on the very register passed
     * to the helper (else the verifier sees the check on a copy and refuses the program). */
    asm volatile("" : "+r"(len));
    if (len > sizeof(struct xp_launch_event))
        len = sizeof(struct xp_launch_event);
    if (events.ringbuf_output(ev, len, 0) != 0) {
        xp_count(XP_CNT_RINGBUF_FULL);
        return 0;
    }
    xp_count(XP_CNT_EVENTS);
    return 0;
}

/* bcc 0.26 cannot pass a per-attachment cookie, so each probe-table slot gets its own entry
 * function: slot 0 is the marker, slots 1..8 the launch API symbols user space attached. */
int on_launch_marker(struct pt_regs *ctx)
{
    return xp_emit_launch(ctx, 0, PT_REGS_PARM1(ctx), (u32)PT_REGS_PARM2(ctx));
}

#define XP_API_PROBE(n) \
    int on_launch_api_##n(struct pt_regs *ctx) { return xp_emit_launch(ctx, n, 0, 0); }
XP_API_PROBE(1)
XP_API_PROBE(2)
XP_API_PROBE(3)
XP_API_PROBE(4)
XP_API_PROBE(5)
XP_API_PROBE(6)
XP_API_PROBE(7)
XP_API_PROBE(8)
