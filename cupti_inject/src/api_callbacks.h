/* The API callbacks (api_callbacks.c): which APIs are traced, the callback itself. */
#ifndef XP_API_CALLBACKS_H
#define XP_API_CALLBACKS_H

#include <cupti.h>
#include <stdatomic.h>
#include <stdint.h>

void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
                          const void *data);
/* Subscribe to the traced runtime and driver APIs (and, for cudaProfilerApi windows, the
 * profiler start/stop calls); write their names into the stream. */
void enable_api_callbacks(CUpti_SubscriberHandle subscriber);
/* The traced APIs' names, again (a forked child's stream is new). */
void emit_api_names(void);
/* Turn the traced APIs' callbacks on or off in CUPTI (a follower of the windows,
 * WINDOW_FOLLOW_CALLBACKS: caller holds window_lock). */
void api_callbacks_set(int on);
/* A callback our subscriber needs on now (traced and on, or opening windows). */
int api_callback_needed(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);

#endif
