/* CPU sampler: runs on every cpu-clock perf event (one per CPU at the sampling frequency) and
 * sends one record with the user and kernel stacks of the interrupted thread, if it belongs to
 * the target's process tree.
 *
 * Stacks go into the ring buffer record itself (bpf_get_stack), not into a BPF stack map:
 * a stack map loses stacks on hash-bucket collisions (-EEXIST) and must be read after the
 * fact, when its entries may already be replaced.  Copying ~2 KiB per sample at 99 Hz per CPU
 * costs nothing measurable and leaves only one way to lose a sample: a full ring buffer,
 * which is counted.
 *
 * Built with -DXP_KERNEL_MODE_ONLY (record as root, beside the in-process sampler): only
 * samples that interrupted the kernel are kept, with their kernel stack alone, and the thread
 * is sent SIGURG, so that the in-process sampler's handler takes its user stack (by CFI, with
 * Python frames) as it returns to user space; the collector joins the two by thread and time.
 * User-mode time is the in-process sampler's own clock (user-space task-clock), so every
 * sample still stands for 1/F s of CPU time.
 */
#include <uapi/linux/bpf_perf_event.h>
#include "process_tree.h"

#define XP_MAX_FRAMES 127

/* paused[0] != 0: outside the recording's capture windows (record sets it from the window
 * control page): no sample, no signal. */
BPF_ARRAY(paused, u32, 1);

struct xp_sample_event {
    u32 kind;
    u32 pid;
    u32 tid;
    u32 cpu;
    u64 ts;
    char comm[16];
    s32 ustack_bytes;   /* < 0: error from bpf_get_stack */
    s32 kstack_bytes;
    u64 ustack[XP_MAX_FRAMES];
    u64 kstack[XP_MAX_FRAMES];
};

int on_cpu_clock(struct bpf_perf_event_data *ctx)
{
    u64 id = bpf_get_current_pid_tgid();
    u32 tgid = id >> 32;
    if (tgid == 0 || !xp_is_tracked(tgid))
        return 0;
    u32 zero = 0;
    u32 *is_paused = paused.lookup(&zero);
    if (is_paused && *is_paused)
        return 0;
#ifdef XP_KERNEL_MODE_ONLY
    if ((ctx->regs.cs & 3) != 0) /* interrupted user space: the in-process sampler's part */
        return 0;
#endif
    struct xp_sample_event *ev = events.ringbuf_reserve(sizeof(struct xp_sample_event));
    if (!ev) {
        xp_count(XP_CNT_RINGBUF_FULL);
        return 0;
    }
    ev->kind = XP_EV_SAMPLE;
    ev->pid = tgid;
    ev->tid = (u32)id;
    ev->cpu = bpf_get_smp_processor_id();
    ev->ts = bpf_ktime_get_ns();
    bpf_get_current_comm(&ev->comm, sizeof(ev->comm));
#ifdef XP_KERNEL_MODE_ONLY
    ev->ustack_bytes = 0;
#else
    ev->ustack_bytes = bpf_get_stack(ctx, ev->ustack, sizeof(ev->ustack), BPF_F_USER_STACK);
    if (ev->ustack_bytes < 0)
        xp_count(XP_CNT_USTACK_ERR);
    else if (ev->ustack_bytes == sizeof(ev->ustack))
        xp_count(XP_CNT_USTACK_TRUNC);
#endif
    ev->kstack_bytes = bpf_get_stack(ctx, ev->kstack, sizeof(ev->kstack), 0);
    if (ev->kstack_bytes < 0)
        xp_count(XP_CNT_KSTACK_ERR);
    events.ringbuf_submit(ev, 0);
    xp_count(XP_CNT_EVENTS);
#ifdef XP_KERNEL_MODE_ONLY
    /* SIGURG, whose default action is to ignore it: a thread without the sampler's handler
     * (before the library's constructor, a static binary) is not killed. */
    bpf_send_signal_thread(23); /* SIGURG */
#endif
    return 0;
}
