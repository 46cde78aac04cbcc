/* NVTX capture range (record --capture-range nvtx:NAME[@DOMAIN]): a window opens when a
 * range named NAME begins (nvtxRangePush*, nvtxRangeStart*, their domain forms; the name as
 * text or as a registered string) and closes when that same range ends (the pop at its level
 * on its thread and domain, or the end of its range id).  NAME alone matches in every domain;
 * NAME@DOMAIN only in the domain created with that name.  One window at a time: a matching
 * range that begins inside the window (nested, or on another thread) is part of it. */
#ifndef XP_NVTX_WINDOW_H
#define XP_NVTX_WINDOW_H

#include <cupti.h>

enum xp_nvtx_window_event { XP_NVTX_NONE = 0, XP_NVTX_OPEN = 1, XP_NVTX_CLOSE = -1 };

/* "NAME" or "NAME@DOMAIN" (after "nvtx:"); 0 when usable. */
int xp_nvtx_window_configure(const char *spec);

/* Turn on the NVTX callbacks the matching needs (after cuptiSubscribe). */
CUptiResult xp_nvtx_window_enable(CUpti_SubscriberHandle subscriber);

/* From the CUPTI callback of domain CUPTI_CB_DOMAIN_NVTX: what the call did to the window
 * (the caller opens and closes it, and may ignore an opening past --capture-range-end). */
enum xp_nvtx_window_event xp_nvtx_window_event(CUpti_CallbackId cbid, const CUpti_NvtxData *data);

/* Ranges the matching could not follow (no return value for a start, too many domains). */
unsigned long long xp_nvtx_window_untracked(void);

#endif
