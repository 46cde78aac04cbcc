/* NVTX (nvtx.c): handed to CUPTI; MARKER activity once the process uses NVTX. */
#ifndef XP_NVTX_H
#define XP_NVTX_H

extern _Atomic int nvtx_used, cupti_ready;
/* MARKER activity on, once both CUPTI is set up and the process has used NVTX. */
void enable_markers_once(void);
/* A window opens or closes (a follower of the windows, WINDOW_FOLLOW_ACTIVITY: caller holds
 * window_lock): markers follow it once the process has used NVTX. */
void markers_follow_window(int on);

#endif
