/* The program's own CUPTI client (torch.profiler's Kineto), whose calls the preloaded sampler
 * library hands over (cupti_host.h), served from our session (program_profiler.c). */
#ifndef XP_PROGRAM_PROFILER_H
#define XP_PROGRAM_PROFILER_H

#include <cupti.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

extern _Atomic int program_callbacks_on; /* it has callbacks on: on_callback forwards */
extern _Atomic int program_forwarding;   /* its trace runs: completed buffers go to it too */
/* First thing at the set-up: the sampler library's interposed CUPTI calls come here. */
void program_profiler_register(void);
/* Our subscriber, which the client's callbacks are turned on for. */
void program_profiler_attach(CUpti_SubscriberHandle subscriber);
/* An activity kind on or off for us (every enable/disable of ours goes through here): on in
 * CUPTI while we or the client want it. */
CUptiResult kind_set(CUpti_ActivityKind kind, int on);
/* A kind we have enabled at some time (records of the others are the client's only). */
int kind_ours(CUpti_ActivityKind kind);
int program_wants_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid);
void program_forward_callback(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void *data);
/* A kind the client enabled in its current trace (its records are forwarded). */
int program_takes_kind(CUpti_ActivityKind kind);
/* The client registered its buffer callbacks; a buffer from its request callback (0: none),
 * handed back filled. */
int program_has_buffers(void);
int program_buffer(uint8_t **buffer, size_t *size);
void program_buffer_done(CUcontext ctx, uint32_t stream_id, uint8_t *buffer, size_t size,
                         size_t used);
/* PROGRAM_CUPTI rows and the forwarding counters (at the final flush). */
void emit_program_cupti(void);
void program_profiler_final(void);
void program_profiler_fork_child(void);

#endif
