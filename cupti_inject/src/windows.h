/* Capture windows (windows.c): open_window / close_window, the delay timer, the limit. */
#ifndef XP_WINDOWS_H
#define XP_WINDOWS_H

#include <cupti.h>
#include <pthread.h>
#include <stdatomic.h>

extern int window_mode;            /* enum xp_window_mode */
extern atomic_int window_open;     /* 1 when no window mode is on */
extern pthread_mutex_t window_lock; /* taken before the other locks wherever both are held */
void configure_windows(void);
/* Activity kind on: now without windows, else at each window's opening. */
void enable_kind(CUpti_ActivityKind kind);
void open_window(const char *reason);
void close_window(const char *end_reason);
/* After the set-up: --delay's timer (and a window already due). */
void start_windows(void);
/* What follows the windows, subscribed at the set-up (inject.c) and told under window_lock,
 * in the order subscribed:
 *   WINDOW_FOLLOW_ACTIVITY   on at each opening, off at each closing (after the window's own
 *                            activity kinds; never in a forked child, where CUPTI is unusable)
 *   WINDOW_FOLLOW_CALLBACKS  on at each opening, off a while after a closing (at a periodic
 *                            flush: a call in flight at the close still gets its exit); told
 *                            at once when it subscribes outside a window */
enum xp_window_follow { WINDOW_FOLLOW_ACTIVITY, WINDOW_FOLLOW_CALLBACKS, WINDOW_FOLLOWS };
void windows_subscribe(enum xp_window_follow what, void (*on_change)(int on));
/* After cuptiSubscribe: NVTX callbacks for --capture-range nvtx:NAME. */
void windows_enable_nvtx(CUpti_SubscriberHandle subscriber);
/* An NVTX callback (CUPTI_CB_DOMAIN_NVTX): may open or close an NVTX window. */
void nvtx_window_callback(CUpti_CallbackId cbid, const void *data);
/* From the periodic flush: the API callbacks go off a while after a window closed. */
void windows_periodic(void);
/* At the final flush: a window still open ends with the process. */
void end_open_window(void);
void windows_fork_child(void);

#endif
