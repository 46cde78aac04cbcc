/* The program's own CUPTI client (torch.profiler's Kineto), whose calls the preloaded sampler
 * library hands over (cupti_interpose.h), served from our session (program_profiler.c). */
#ifndef XP_PROGRAM_PROFILER_H
#define XP_PROGRAM_PROFILER_H

#include <cupti.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

extern _Atomic int program_callbacks_on; /* it has callbacks on: on_callback forwards */
/* First thing at the set-up: the sampler library's interposed CUPTI calls come here. */
void program_profiler_register(void);
/* Our subscriber, which the client's callbacks are turned on for, and whether we need a
 * callback on now (the client turning it off leaves it on). */
void program_profiler_attach(CUpti_SubscriberHandle subscriber,
                             int (*needed)(CUpti_CallbackDomain domain, CUpti_CallbackId cbid));
int program_wants_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void program_forward_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data);
/* PROGRAM_CUPTI rows and the forwarding counters (at the final flush). */
void emit_program_cupti(void);
void program_profiler_final(void);
void program_profiler_fork_child(void);

#endif
